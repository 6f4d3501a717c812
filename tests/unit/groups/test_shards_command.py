"""`leasecron shards GROUP`: the table of a group's shard Leases says which are of the recorded
count, which are retired, which belong to another count and which are a job's own, and the
command refuses `-A`."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from leasecron.cli import main
from leasecron.cli._shards import describe, shard_rows
from leasecron.coordination.shards import shard_labels
from leasecron.models.groups import ANNOTATION_RETIRED, GroupState, own_ref
from leasecron.models.shards import own_lease_name, shard_lease_name


def lease(
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    token: int = 3,
    labels: dict[str, str] | None = None,
) -> Any:
    return {
        "metadata": {"name": name, "annotations": annotations or {}, "labels": labels or {}},
        "spec": {"holderIdentity": "", "leaseTransitions": token},
    }


def test_rows_say_which_shard_leases_are_current_retired_or_of_another_count() -> None:
    objs = [
        lease(shard_lease_name("g", 0, shards=2), annotations={ANNOTATION_RETIRED: "x"}),
        lease(shard_lease_name("g", 0, shards=4), token=10_001),
        lease(shard_lease_name("g", 0, shards=8)),
        lease(own_lease_name("g", "report"), labels=shard_labels("g", own_ref("g", "report"))),
    ]
    rows = shard_rows(objs, group="g", shards=4)
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("leasecron-shard-g-2-0", "retired", "3"),
        ("leasecron-shard-g-4-0", "current", "10001"),
        ("leasecron-shard-g-8-0", "unused", "3"),
        ("leasecron-shard-g-job-report", "own report", "3"),
    ]
    assert describe(GroupState(shards=4, own=frozenset({"report"})), group="g").endswith(
        "jobs on Leases of their own: 1"
    )


def test_the_command_refuses_all_namespaces() -> None:
    result = CliRunner().invoke(main, ["shards", "g", "-A", "--count", "4"])
    assert result.exit_code == 1
    assert "per namespace" in result.output
