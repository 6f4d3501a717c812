"""`leasecron shards GROUP`: the table of a group's shard Leases says which are of the recorded
count, which are retired and which belong to another count, and the command refuses `-A`."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from leasecron.cli import main
from leasecron.cli._shards import shard_rows
from leasecron.models.groups import ANNOTATION_RETIRED
from leasecron.models.shards import shard_lease_name


def lease(name: str, *, annotations: dict[str, str] | None = None, token: int = 3) -> Any:
    return {
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {"holderIdentity": "", "leaseTransitions": token},
    }


def test_rows_say_which_shard_leases_are_current_retired_or_of_another_count() -> None:
    objs = [
        lease(shard_lease_name("g", 0, shards=2), annotations={ANNOTATION_RETIRED: "x"}),
        lease(shard_lease_name("g", 0, shards=4), token=10_001),
        lease(shard_lease_name("g", 0, shards=8)),
    ]
    rows = shard_rows(objs, group="g", shards=4)
    assert [(r[0], r[1], r[3]) for r in rows] == [
        ("leasecron-shard-g-2-0", "retired", "3"),
        ("leasecron-shard-g-4-0", "current", "10001"),
        ("leasecron-shard-g-8-0", "unused", "3"),
    ]


def test_the_command_refuses_all_namespaces() -> None:
    result = CliRunner().invoke(main, ["shards", "g", "-A", "--count", "4"])
    assert result.exit_code == 1
    assert "per namespace" in result.output
