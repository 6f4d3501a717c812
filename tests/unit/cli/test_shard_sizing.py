"""`leasecron shards GROUP` says how the group's shards spread over its live replicas, and the
count to give it when they are fewer than `SHARDS_PER_REPLICA` per replica."""

from __future__ import annotations

from leasecron.cli._shards import sizing_advice


def test_enough_shards_per_replica_need_no_advice() -> None:
    assert sizing_advice(32, 6, group="billing") == "6 live replicas: 5.3 shards per replica"


def test_too_few_shards_per_replica_get_the_count_to_give() -> None:
    advice = sizing_advice(32, 12, group="billing")
    assert advice.startswith("12 live replicas: 2.7 shards per replica;")
    assert advice.endswith("leasecron shards billing --count 64")


def test_a_group_without_live_replicas_says_so() -> None:
    assert sizing_advice(32, 0, group="billing") == "no live replica of the group"
