"""Corrupted Leases, written raw with the admin client: no crash, one clear log line per
version, a safe decision, and the job continues once someone can legitimately claim."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog
from kubernetes.client import ApiClient

from leasecron.coordination import LEASE_SELECTOR, TickLock, lease_informer
from leasecron.kube.clients import Kube
from leasecron.kube.errors import Invalid
from leasecron.kube.leases import LeaseStore
from leasecron.models.configs import LockConfig
from leasecron.models.leases import parse_lease
from leasecron.models.names import ANNOTATION_TICK, LABEL_ROLE

pytestmark = pytest.mark.integration
LEASE = "leasecron-job-corrupt"
TICK = datetime(2026, 1, 1, tzinfo=UTC)
CONFIG = LockConfig(at_most_for=1)
CORRUPT = "lease record is corrupt; deciding conservatively"


def create_raw(api: ApiClient, namespace: str, body: dict[str, Any]) -> None:
    """POST the JSON as it is, past any client-side model validation."""
    path = LeaseStore(Kube(api, max_workers=1)).collection_path(namespace=namespace)
    Kube(api, max_workers=1).request_sync("POST", path, body=body)


def raw_lease(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": LEASE,
            "labels": {LABEL_ROLE: "guard"},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


async def claims(api: ApiClient, namespace: str, *, wait: float) -> list[int | None]:
    """Claim three ticks at once, then (after `wait` s) three more: the tokens or None."""
    kube = Kube(api, max_workers=2)
    informer = lease_informer(kube, namespace=namespace)
    await informer.start()
    lock = TickLock(
        kube, informer, namespace=namespace, name=LEASE, config=CONFIG, identity="replica"
    )
    results: list[int | None] = []
    try:
        for minute in range(6):
            if minute == 3:
                await asyncio.sleep(wait)  # the conservative expiry under test is elapsed time
            grant = await lock.claim(TICK + timedelta(minutes=minute))
            results.append(grant.token if grant else None)
            if grant is not None:
                await grant.release()
    finally:
        await informer.stop()
    return results


HELD_BY_A_GHOST = [None, None, None, 1, 2, 3]
FREE = [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize(
    ("spec", "annotations", "expected", "problem"),
    [
        pytest.param({}, None, FREE, None, id="no-spec"),
        pytest.param(
            {"holderIdentity": "ghost"},
            None,
            HELD_BY_A_GHOST,
            "leaseDurationSeconds is missing",
            id="holder-without-duration",
        ),
        pytest.param(
            {"holderIdentity": "ghost", "leaseDurationSeconds": 2**31 - 1},
            None,
            HELD_BY_A_GHOST,
            "leaseDurationSeconds 2147483647 is outside",
            id="huge-duration",
        ),
        pytest.param(
            {"holderIdentity": "gh\u0007ost \u2603", "leaseDurationSeconds": 1},
            None,
            HELD_BY_A_GHOST,
            "holderIdentity",
            id="garbage-holder",
        ),
        pytest.param(
            {},
            {ANNOTATION_TICK: "right after lunch", "example.com/owner": "team-a"},
            FREE,
            "is not a tick",
            id="garbage-tick-and-foreign-annotations",
        ),
        pytest.param(
            {},
            {ANNOTATION_TICK: "2999-01-01T00:00:00Z"},
            FREE,
            None,
            id="tick-far-in-the-future",
        ),
    ],
)
def test_a_corrupt_lease_gets_a_safe_decision_one_log_line_and_the_job_continues(
    kube_api: ApiClient,
    namespace: str,
    spec: dict[str, Any],
    annotations: dict[str, str] | None,
    expected: list[int | None],
    problem: str | None,
) -> None:
    create_raw(kube_api, namespace, raw_lease(spec, annotations))
    with structlog.testing.capture_logs() as logs:
        tokens = asyncio.run(claims(kube_api, namespace, wait=CONFIG.lease_duration_s + 0.1))
    assert tokens == expected
    lines = [entry for entry in logs if entry["event"] == CORRUPT]
    if problem is None:
        assert lines == []
    else:
        assert len(lines) == 1, lines
        assert problem in lines[0]["problems"]
        assert lines[0]["lease"] == LEASE
    path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}"
    obj = Kube(kube_api, max_workers=1).request_sync("GET", path)
    record = parse_lease(obj)
    assert record.problems == ()
    assert record.tick == TICK + timedelta(minutes=5)
    if annotations and "example.com/owner" in annotations:
        assert obj["metadata"]["annotations"]["example.com/owner"] == "team-a"


@pytest.mark.parametrize(
    "spec",
    [
        {"holderIdentity": "x", "leaseDurationSeconds": -5},
        {"holderIdentity": "x", "leaseTransitions": -1},
        {"holderIdentity": "x", "renewTime": "yesterday"},
    ],
    ids=["negative-duration", "negative-transitions", "garbage-time"],
)
def test_the_api_server_refuses_what_it_can_validate_itself(
    kube_api: ApiClient, namespace: str, spec: dict[str, Any]
) -> None:
    # These can only reach a replica from another store; the parser's unit tests cover them.
    with pytest.raises(Invalid) as info:
        create_raw(kube_api, namespace, raw_lease(spec))
    assert info.value.status in (400, 422)


def test_the_selector_of_the_shared_cache_is_the_documented_one() -> None:
    assert LEASE_SELECTOR == "leasecron.dev/role in (leader,shard,guard,group,job)"
