"""spec.timeout, spec.retry and spec.concurrencyPolicy: defaults, bounds and the buckets they do
not fit, each refused with a message that names the field and the value."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from leasecron.models.specs import (
    ConcurrencyPolicy,
    FieldProblem,
    RetrySpec,
    SpecError,
    validate_resource,
)


def resource(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "nightly-report", "namespace": "billing"},
        "spec": spec,
    }


def once(**spec: Any) -> dict[str, Any]:
    return resource({"bucket": "once-per-tick", "schedule": "0 2 * * *", **spec})


def owner(**spec: Any) -> dict[str, Any]:
    return resource({"bucket": "single-owner", **spec})


def only_problem(obj: dict[str, Any]) -> FieldProblem:
    with pytest.raises(SpecError) as caught:
        validate_resource(obj)
    problems = caught.value.problems
    assert len(problems) == 1, problems
    return problems[0]


def test_a_job_without_run_controls_has_no_timeout_no_retries_and_forbids_overlap() -> None:
    spec = validate_resource(once()).spec
    assert spec.timeout is None
    assert (spec.retry.limit, spec.retry.backoff) == (0, timedelta(seconds=10))
    assert spec.concurrency_policy is ConcurrencyPolicy.FORBID


def test_run_controls_are_read_from_their_user_facing_names() -> None:
    spec = validate_resource(
        once(timeout="5m", retry={"limit": 3, "backoff": "30s"}, concurrencyPolicy="Replace")
    ).spec
    assert spec.timeout == timedelta(minutes=5)
    assert (spec.retry.limit, spec.retry.backoff) == (3, timedelta(seconds=30))
    assert spec.concurrency_policy is ConcurrencyPolicy.REPLACE
    assert spec.to_dict()["concurrencyPolicy"] == "Replace"


def test_the_backoff_doubles_before_each_later_retry() -> None:
    retry = RetrySpec(limit=3, backoff=timedelta(seconds=5))
    assert [retry.delay(a) for a in (2, 3, 4)] == [timedelta(seconds=s) for s in (5, 10, 20)]


@pytest.mark.parametrize(
    ("spec", "path", "value", "message"),
    [
        (once(timeout="0s"), "spec.timeout", "0s", "must be at least '1s'"),
        (once(timeout="8days"), "spec.timeout", "8days", "is not a duration"),
        (once(timeout="200h"), "spec.timeout", "200h", "must be at most '168h'"),
        (once(retry={"limit": 11}), "spec.retry.limit", 11, "must be at most 10"),
        (once(retry={"limit": -1}), "spec.retry.limit", -1, "must be at least 0"),
        (once(retry={"backoff": "2h"}), "spec.retry.backoff", "2h", "must be at most '1h'"),
        (once(retry={"tries": 2}), "spec.retry.tries", 2, "is not a known field"),
        (
            once(concurrencyPolicy="Queue"),
            "spec.concurrencyPolicy",
            "Queue",
            "'Forbid', 'Replace' or 'Allow'",
        ),
        (owner(timeout="5m"), "spec.timeout", "5m", "must not be set when spec.bucket is single"),
        (owner(retry={"limit": 2}), "spec.retry", {"limit": 2}, "limit must be 0 when spec.bucket"),
        (
            owner(concurrencyPolicy="Allow"),
            "spec.concurrencyPolicy",
            "Allow",
            "must be Forbid when spec.bucket is single-owner",
        ),
    ],
)
def test_bad_run_controls_name_the_field_and_the_value(
    spec: dict[str, Any], path: str, value: Any, message: str
) -> None:
    problem = only_problem(spec)
    assert (problem.path, problem.value) == (path, value)
    assert message in problem.message


def test_a_single_owner_job_may_spell_out_the_defaults() -> None:
    spec = validate_resource(owner(retry={"limit": 0}, concurrencyPolicy="Forbid")).spec
    assert spec.retry.limit == 0
