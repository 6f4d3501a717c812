"""`shared_json`: equal decoded JSON values hold one instance of each dict and list, values
that differ (also only by a type JSON tells apart) do not, and the table lets a value go."""

from __future__ import annotations

import gc
import json

from leasecron.kube._caches import _SHARED, SharedDict, shared_json


def spec(schedule: str) -> dict[str, object]:
    return json.loads(
        json.dumps({"schedule": schedule, "lock": {"atMostFor": "5m"}, "tags": ["a", "b"]})
    )


def test_equal_values_share_one_instance_of_every_dict_and_list() -> None:
    first, second = shared_json(spec("* * * * *")), shared_json(spec("* * * * *"))
    assert first is second
    assert first == spec("* * * * *")
    assert isinstance(first, SharedDict)


def test_values_that_differ_share_only_their_equal_parts() -> None:
    hourly, daily = shared_json(spec("0 * * * *")), shared_json(spec("0 0 * * *"))
    assert hourly is not daily and hourly != daily
    assert hourly["lock"] is daily["lock"] and hourly["tags"] is daily["tags"]


def test_one_true_and_one_point_zero_are_not_the_same_json() -> None:
    found = [shared_json({"x": value}) for value in (1, True, 1.0, "1")]
    assert [json.dumps(v) for v in found] == ['{"x": 1}', '{"x": true}', '{"x": 1.0}', '{"x": "1"}']
    assert len({id(v) for v in found}) == 4


def test_scalars_come_back_as_they_are() -> None:
    assert shared_json("report") == "report" and shared_json(None) is None


def test_the_table_holds_a_value_only_while_something_else_does() -> None:
    gc.collect()  # what earlier tests left for the collector goes first, not in the count
    held = shared_json({"only": ["here"]})
    before = len(_SHARED)
    del held
    gc.collect()
    assert len(_SHARED) == before - 2  # the dict and the list in it
