"""Fault plans: which requests a rule hits, how often, what bad rules say, and file plans."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from leasecron.testing.faults import Fault, FaultPlan, load_faults


def hit(plan: FaultPlan, **request: Any) -> Fault | None:
    coordinates = {"verb": "update", "resource": "leases", "name": "a", "namespace": "ns"}
    rule = plan.match(**{**coordinates, **request})
    return None if rule is None else rule.fault


def test_an_empty_plan_lets_every_request_through() -> None:
    assert hit(FaultPlan()) is None


@pytest.mark.parametrize(
    ("fault", "request_", "matches"),
    [
        (Fault(action="fail", verb="update", resource="leases"), {}, True),
        (
            Fault(action="fail", verb="*", resource="*"),
            {"verb": "watch", "resource": "jobruns"},
            True,
        ),
        (Fault(action="fail", verb="create", resource="leases"), {}, False),
        (Fault(action="fail", verb="update", resource="jobruns"), {}, False),
        (Fault(action="fail", verb="update", resource="leases", name="a"), {}, True),
        (Fault(action="fail", verb="update", resource="leases", name="b"), {}, False),
        (Fault(action="fail", verb="update", resource="leases", namespace="other"), {}, False),
        (
            Fault(action="fail", verb="get", resource="leases", name="a"),
            {"verb": "list", "name": None},
            False,
        ),
        (Fault(action="fail", resource="jobruns"), {"resource": "jobruns/status"}, False),
        (Fault(action="fail", resource="jobruns/status"), {"resource": "jobruns/status"}, True),
    ],
)
def test_a_rule_hits_only_requests_matching_all_its_fields(
    fault: Fault, request_: dict[str, Any], matches: bool
) -> None:
    plan = FaultPlan()
    plan.add(fault)

    assert (hit(plan, **request_) is fault) is matches


def test_times_limits_the_hits_and_after_lets_the_first_matches_through() -> None:
    plan = FaultPlan()
    rule = plan.add(Fault(action="lose_reply", times=2, after=1))

    outcomes = [hit(plan) is not None for _ in range(5)]

    assert outcomes == [False, True, True, False, False]
    assert rule.hits == 2


def test_the_first_rule_that_fires_wins_and_later_ones_take_over_when_it_is_spent() -> None:
    plan = FaultPlan()
    first = plan.add(Fault(action="status", status=429, times=1))
    second = plan.add(Fault(action="fail"))

    actions = [f.action if (f := hit(plan)) else None for _ in range(3)]

    assert actions == ["status", "fail", "fail"]
    assert (first.hits, second.hits) == (1, 2)


def test_removed_cleared_and_block_scoped_rules_stop_hitting_and_are_lifted() -> None:
    plan = FaultPlan()
    kept = plan.add(Fault(verb="get", resource="leases", action="fail"))
    removed = plan.add(Fault(action="hang"))
    plan.remove(removed)
    assert removed.lifted.is_set() and hit(plan) is None

    with plan.injected(Fault(action="delay", seconds=1)) as scoped:
        assert hit(plan) is scoped.fault
    assert scoped.lifted.is_set() and hit(plan) is None

    plan.clear()
    assert kept.lifted.is_set() and plan.rules == []


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"action": "explode"}, "Fault.action must be one of ['lose_reply', 'fail', 'status', "),
        ({"verb": "PUT"}, "Fault.verb must be one of"),
        ({"resource": ""}, "Fault.resource must be a non-empty string, got ''"),
        ({"name": ""}, "Fault.name must be a non-empty string, got ''"),
        ({"status": 200}, "Fault.status must be an integer >= 400, got 200"),
        ({"status": 600}, "Fault.status must be an integer <= 599, got 600"),
        ({"status": True}, "Fault.status must be an integer >= 400, got True"),
        ({"seconds": -1}, "Fault.seconds must be a finite number >= 0, got -1"),
        ({"seconds": float("inf")}, "Fault.seconds must be a finite number >= 0, got inf"),
        ({"seconds": "2"}, "Fault.seconds must be a number >= 0, got '2'"),
        ({"times": 0}, "Fault.times must be an integer >= 1, got 0"),
        ({"after": -1}, "Fault.after must be an integer >= 0, got -1"),
    ],
)
def test_a_bad_fault_is_refused_naming_the_field_and_value(
    fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(ValueError, match="^" + named.replace("[", r"\[").replace("(", r"\(")):
        Fault(**{"action": "fail", **fields})


def test_an_unknown_field_in_json_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"unknown Fault field\(s\) \['acton'\]"):
        Fault.from_dict({"acton": "fail"})


def test_a_fault_without_an_action_is_refused() -> None:
    with pytest.raises(ValueError, match=r"Fault\.action is required"):
        Fault.from_dict({"verb": "update", "resource": "leases"})


def test_a_written_plan_loads_back_as_the_same_faults(tmp_path: Path) -> None:
    faults = [
        Fault(verb="update", resource="leases", action="lose_reply", times=1),
        Fault(action="status", status=429, after=2),
    ]
    plan = FaultPlan()
    for fault in faults:
        plan.add(fault)

    path = plan.write(tmp_path / "faults.json")

    assert load_faults(path) == faults
    assert not [p for p in tmp_path.iterdir() if p.name != "faults.json"]  # no temp file left


def test_a_file_plan_follows_the_file_as_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "faults.json"
    plan = FaultPlan(path=path)
    assert hit(plan) is None  # missing file: no faults

    FaultPlan().write(path, faults=[Fault(action="fail", times=1)])
    assert hit(plan) == Fault(action="fail", times=1)
    assert hit(plan) is None  # spent: hits persist while the file is unchanged
    spent = plan.rules[0]

    FaultPlan().write(path, faults=[Fault(action="status", status=429)])
    assert hit(plan) == Fault(action="status", status=429)
    assert spent.lifted.is_set()  # the old file's rules leave the plan

    path.unlink()
    assert hit(plan) is None


def test_in_process_rules_come_before_the_file_rules(tmp_path: Path) -> None:
    path = FaultPlan().write(tmp_path / "faults.json", faults=[Fault(action="fail")])
    plan = FaultPlan(path=path)
    plan.add(Fault(action="delay", seconds=1))

    assert [r.fault.action for r in plan.rules] == ["delay", "fail"]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("{not json", "Expecting property name"),
        ('{"action": "fail"}', "expected a JSON list of faults, got dict"),
        ('[{"action": "explode"}]', "Fault.action must be one of"),
        ('[{"acton": "fail"}]', "unknown Fault field"),
    ],
)
def test_a_corrupt_file_injects_nothing_and_logs_the_file_and_problem(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, text: str, problem: str
) -> None:
    path = tmp_path / "faults.json"
    path.write_text(text)
    plan = FaultPlan(path=path)

    with caplog.at_level(logging.ERROR, logger="leasecron.faults"):
        assert hit(plan) is None
        assert hit(plan) is None

    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1  # once per change of the file, not per request
    assert str(path) in errors[0] and problem in errors[0]
