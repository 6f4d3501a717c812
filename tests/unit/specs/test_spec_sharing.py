"""Equal specs (and spec parts) of validated ScheduledJobs are one object while a job holds
it: 10,000 jobs with default specs hold one spec, not 10,000 (docs/benchmarks.md, memory)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

from leasecron.models.specs import ScheduledJob


def resource(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"bucket": "once-per-tick", "schedule": "* * * * *", **spec},
    }


def test_jobs_with_equal_specs_hold_one_spec() -> None:
    a = ScheduledJob.from_resource(resource("a"))
    b = ScheduledJob.from_resource(resource("b"))
    assert a.spec is b.spec
    assert (a.name, b.name) == ("a", "b")


def test_different_specs_share_their_equal_parts() -> None:
    a = ScheduledJob.from_resource(resource("a", handler="one"))
    b = ScheduledJob.from_resource(resource("b", handler="two", lock={"atMostFor": "2m"}))
    assert a.spec is not b.spec
    assert a.spec.handler == "one" and b.spec.handler == "two"
    assert a.spec.retry is b.spec.retry and a.spec.history is b.spec.history
    assert a.spec.lock is not b.spec.lock
    assert b.spec.lock.at_most_for.total_seconds() == 120


def test_a_shared_spec_is_what_validation_makes() -> None:
    a = ScheduledJob.from_resource(resource("a", startingDeadline="7s", suspend=True))
    again = ScheduledJob.from_resource(resource("a", startingDeadline="7s", suspend=True))
    assert again.spec is a.spec
    assert a.spec.starting_deadline.total_seconds() == 7 and a.spec.suspend
    assert (
        a.spec
        == ScheduledJob.from_resource(resource("c", startingDeadline="7s", suspend=True)).spec
    )


def test_a_spec_no_job_holds_is_not_kept() -> None:
    a = ScheduledJob.from_resource(resource("a", handler="once-only"))
    held = weakref.ref(a.spec)
    del a
    gc.collect()
    assert held() is None
