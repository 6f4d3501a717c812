"""Fixtures shared by the integration modules (the cluster fixtures themselves, `kube_api`,
`namespace`, `kubeconfig`, `leasecron_crds`, ..., come from leasecron.testing.pytest_plugin).

Only what several modules used to copy lives here; a module that needs a variant (another
timeout, say) defines its own fixture of the same name, which takes precedence."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from operator_helpers import StartOperator, StartReplica, running_operator, running_replica

from leasecron import JobContext, Scheduler, close_guards
from leasecron.kube.clients import Kube
from leasecron.runtime import Tuning
from leasecron.testing.handlers import run_tick_sync, scheduled_job

ONE_RUN_TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)


@pytest.fixture
def kube(kubeconfig: Path, leasecron_crds: list[str]) -> Iterator[Kube]:
    """leasecron's own client for the test cluster, with the CRDs installed; closed after."""
    made = Kube.from_config(kubeconfig=str(kubeconfig))
    yield made
    made.api_client.rest_client.close()


@pytest.fixture
def one_run(kube: Kube, namespace: str) -> str:
    """A once-per-tick job `report` that ran tick `ONE_RUN_TICK` in this process: its Lease
    holds token 1 and the tick, one JobRun records it. The job's name."""
    scheduler = Scheduler(namespace=namespace, kube=kube, tuning=Tuning(member_duration_s=3))

    def report(ctx: JobContext) -> None:
        ctx.assert_held()

    scheduler.register("report", report)
    result = run_tick_sync(scheduler, scheduled_job("report"), tick=ONE_RUN_TICK)
    assert result.outcome == "Succeeded"
    return "report"


@pytest.fixture
def start_operator(
    kubeconfig: Path, namespace: str, leasecron_crds: list[str], tmp_path: Path
) -> StartOperator:
    """`with start_operator(**options) as operator:` the operator (a subprocess) watching this
    test's namespace, once it leads; its log in the test's directory."""
    return functools.partial(running_operator, kubeconfig, namespace, tmp_path)


@pytest.fixture
def start_replica(kubeconfig: Path, namespace: str, tmp_path: Path) -> StartReplica:
    """`with start_replica(identity=..., group=..., handlers=...) as replica:` a replica
    process of the Scheduler in this test's namespace; its log in the test's directory."""
    return functools.partial(running_replica, kubeconfig, namespace, tmp_path)


@pytest.fixture
def closed_guards() -> Iterator[None]:
    """The test starts and ends without guard caches or grants left in this process
    (`pytestmark = pytest.mark.usefixtures("closed_guards")` in a guard module)."""
    yield
    close_guards()


@pytest.fixture
def kubes(request: pytest.FixtureRequest, kube_api: Any, leasecron_crds: list[str]) -> list[Kube]:
    """One client per replica, each with its own Lease cache as separate pods have (the
    module's `REPLICAS` of them, default 3), with the CRDs installed."""
    count = getattr(request.module, "REPLICAS", 3)
    return [Kube(kube_api, max_workers=4) for _ in range(count)]
