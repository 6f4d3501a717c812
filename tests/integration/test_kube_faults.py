"""Request-level faults against the real API server: what each injected fault does to a
request, whether a write lands, and the error its caller sees."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client import ApiClient
from prometheus_client import REGISTRY

from leasecron.kube.clients import Kube
from leasecron.kube.errors import OutcomeUnknown, Unavailable
from leasecron.kube.leases import LeaseStore
from leasecron.testing.faults import ENV_VAR, Fault, FaultPlan, fault_plan

pytestmark = pytest.mark.integration


@pytest.fixture
def store(kube_api: ApiClient) -> Iterator[LeaseStore]:
    kube = Kube(kube_api, max_workers=4, request_timeout=5.0)
    yield LeaseStore(kube)
    asyncio.run(kube.close())


def lease(name: str, holder: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": holder}}


def held_by(store: LeaseStore, namespace: str, holder: str) -> dict[str, Any]:
    """A Lease "a" created by `holder`, with the body to replace it by "replica-b"."""
    created = asyncio.run(store.create(namespace=namespace, body=lease("a", holder)))
    return {**created, "spec": {**created["spec"], "holderIdentity": "replica-b"}}


def holder_of(store: LeaseStore, namespace: str) -> str:
    found = asyncio.run(store.get(namespace=namespace, name="a"))
    assert found is not None
    return str(found["spec"]["holderIdentity"])


def injected_total(*, verb: str, resource: str, action: str) -> float:
    labels = {"verb": verb, "resource": resource, "action": action}
    return REGISTRY.get_sample_value("leasecron_injected_faults_total", labels) or 0.0


def test_a_write_whose_reply_is_lost_lands_while_its_caller_gets_outcome_unknown(
    store: LeaseStore, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    update = held_by(store, namespace, "replica-a")
    rule = fault_plan(store.kube).add(
        Fault(verb="update", resource="leases", action="lose_reply", times=1)
    )
    before = injected_total(verb="update", resource="leases", action="lose_reply")

    with (
        caplog.at_level(logging.WARNING, logger="leasecron.faults"),
        pytest.raises(OutcomeUnknown, match="reply lost"),
    ):
        asyncio.run(store.replace(namespace=namespace, body=update))

    assert holder_of(store, namespace) == "replica-b"
    assert rule.hits == 1
    assert injected_total(verb="update", resource="leases", action="lose_reply") == before + 1
    assert [r.getMessage() for r in caplog.records] == [
        "injecting fault: update leases a -> lose_reply (injected fault)"
    ]


def test_a_create_whose_reply_is_lost_is_matched_by_the_name_in_its_body(
    store: LeaseStore, namespace: str
) -> None:
    fault_plan(store.kube).add(
        Fault(verb="create", resource="leases", name="a", action="lose_reply")
    )
    asyncio.run(store.create(namespace=namespace, body=lease("other", "replica-a")))

    with pytest.raises(OutcomeUnknown):
        asyncio.run(store.create(namespace=namespace, body=lease("a", "replica-a")))

    assert holder_of(store, namespace) == "replica-a"


def test_a_failed_write_is_plain_unavailable_and_does_not_land(
    store: LeaseStore, namespace: str
) -> None:
    update = held_by(store, namespace, "replica-a")
    fault_plan(store.kube).add(Fault(verb="*", resource="*", action="fail"))

    with pytest.raises(Unavailable) as caught:
        asyncio.run(store.replace(namespace=namespace, body=update))

    assert type(caught.value) is Unavailable
    fault_plan(store.kube).clear()
    assert holder_of(store, namespace) == "replica-a"


@pytest.mark.parametrize("status", [503, 429])
def test_an_injected_status_maps_like_the_real_one_and_does_not_land(
    store: LeaseStore, namespace: str, status: int
) -> None:
    update = held_by(store, namespace, "replica-a")

    fault = Fault(verb="update", resource="leases", action="status", status=status)
    with fault_plan(store.kube).injected(fault), pytest.raises(Unavailable) as caught:
        asyncio.run(store.replace(namespace=namespace, body=update))

    assert type(caught.value) is Unavailable
    assert caught.value.status == status
    assert holder_of(store, namespace) == "replica-a"


def test_a_delayed_write_is_held_back_and_then_lands(store: LeaseStore, namespace: str) -> None:
    update = held_by(store, namespace, "replica-a")
    fault_plan(store.kube).add(Fault(verb="update", resource="leases", action="delay", seconds=1.0))

    started = time.monotonic()
    asyncio.run(store.replace(namespace=namespace, body=update))

    assert time.monotonic() - started >= 1.0  # a lower bound: sleep never returns early
    assert holder_of(store, namespace) == "replica-b"


def test_a_hanging_write_times_out_as_outcome_unknown_without_landing(
    store: LeaseStore, namespace: str
) -> None:
    update = held_by(store, namespace, "replica-a")
    rule = fault_plan(store.kube).add(Fault(verb="update", resource="leases", action="hang"))

    with pytest.raises(OutcomeUnknown, match="Read timed out"):
        asyncio.run(store.replace(namespace=namespace, body=update, timeout=0.5))

    assert rule.hits == 1
    assert holder_of(store, namespace) == "replica-a"


def test_a_hanging_read_is_unavailable_not_an_unknown_outcome(
    store: LeaseStore, namespace: str
) -> None:
    fault_plan(store.kube).add(Fault(verb="get", resource="leases", name="a", action="hang"))

    with pytest.raises(Unavailable) as caught:
        asyncio.run(store.get(namespace=namespace, name="a", timeout=0.2))

    assert type(caught.value) is Unavailable


def test_opening_a_watch_is_subject_to_faults(store: LeaseStore, namespace: str) -> None:
    fault_plan(store.kube).add(Fault(verb="watch", resource="leases", action="status", status=503))
    path = store.collection_path(namespace=namespace)

    with pytest.raises(Unavailable) as caught:
        store.kube.stream_lines(path, query={"watch": "1", "timeoutSeconds": "5"})

    assert caught.value.status == 503


def test_a_write_whose_caller_times_out_stays_cancelled_and_can_still_land(
    store: LeaseStore, namespace: str
) -> None:
    update = held_by(store, namespace, "replica-a")
    fault_plan(store.kube).add(Fault(verb="update", resource="leases", action="delay", seconds=1.0))

    async def give_up_early() -> None:
        await asyncio.wait_for(store.replace(namespace=namespace, body=update), timeout=0.1)

    # Cancellation propagates as such (a cancelled task must stop); the caller learns that
    # the outcome is unknown from the TimeoutError, and reads back before relying on it.
    with pytest.raises(TimeoutError):
        asyncio.run(give_up_early())

    deadline = time.monotonic() + 30
    while holder_of(store, namespace) != "replica-b":  # the abandoned write lands later
        assert time.monotonic() < deadline, "the abandoned write never landed"
        time.sleep(0.1)


REPLICA = """
import json, sys
from leasecron.kube.clients import Kube
from leasecron.kube.leases import LeaseStore
from leasecron.testing.faults import install_from_env

kube = Kube.from_config(kubeconfig=sys.argv[1], request_timeout=5.0)
install_from_env(kube)
path = LeaseStore(kube).collection_path(namespace=sys.argv[2])
print(json.dumps({"ready": True}), flush=True)
for _ in sys.stdin:
    try:
        kube.request_sync("GET", path)
        outcome = "ok"
    except Exception as e:
        outcome = f"{type(e).__name__}: {e}"
    print(json.dumps({"outcome": outcome}), flush=True)
"""


def reply(process: subprocess.Popen[str], *, ask: bool = True) -> dict[str, Any]:
    assert process.stdin is not None and process.stdout is not None
    if ask:
        process.stdin.write("list\n")
        process.stdin.flush()
    ready, _, _ = select.select([process.stdout], [], [], 60)
    assert ready, "the replica process did not answer within 60 s"
    line = process.stdout.readline()
    assert line, f"the replica process exited with {process.wait()}"
    answer: dict[str, Any] = json.loads(line)
    return answer


def test_a_replica_process_follows_its_fault_file_while_it_runs(
    kubeconfig: Path, namespace: str, tmp_path: Path
) -> None:
    faults = tmp_path / "faults.json"
    env = {**os.environ, ENV_VAR: str(faults)}
    argv = [sys.executable, "-c", REPLICA, str(kubeconfig), namespace]
    with subprocess.Popen(
        argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        try:
            assert reply(process, ask=False) == {"ready": True}
            assert reply(process) == {"outcome": "ok"}  # no file yet: no faults

            FaultPlan().write(faults, faults=[Fault(verb="list", action="status", status=503)])
            answer = reply(process)["outcome"]
            assert answer.startswith("Unavailable:") and "(injected fault)" in answer

            faults.write_text("{corrupt")
            assert reply(process) == {"outcome": "ok"}  # a corrupt file injects nothing

            FaultPlan().write(faults, faults=[Fault(verb="list", action="fail", times=1)])
            assert "connection refused (injected fault)" in reply(process)["outcome"]
            assert reply(process) == {"outcome": "ok"}  # times=1: spent
        finally:
            process.kill()
