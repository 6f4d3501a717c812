"""Validation of ScheduledJobs: every rule names the field path and the offending value, and
all problems are reported together."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from leasecron.models.specs import MISSING, FieldProblem, SpecError, validate_resource


def resource(spec: Any, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "leasecron.dev/v1alpha1",
        "kind": "ScheduledJob",
        "metadata": {"name": "nightly-report", "namespace": "billing"},
        "spec": spec,
        **extra,
    }


def once(**spec: Any) -> dict[str, Any]:
    return resource({"bucket": "once-per-tick", "schedule": "0 2 * * *", **spec})


def problems_of(obj: Any) -> dict[str, FieldProblem]:
    with pytest.raises(SpecError) as caught:
        validate_resource(obj)
    return {problem.path: problem for problem in caught.value.problems}


def only_problem(obj: Any) -> FieldProblem:
    found = problems_of(obj)
    assert len(found) == 1, found
    return next(iter(found.values()))


def test_at_least_for_above_at_most_for_reads_as_a_sentence_with_both_values() -> None:
    problem = only_problem(once(lock={"atLeastFor": "20m"}))
    assert str(problem) == "spec.lock.atLeastFor: '20m' must not exceed spec.lock.atMostFor ('15m')"
    assert (problem.path, problem.value) == ("spec.lock.atLeastFor", "20m")


def test_every_problem_is_reported_not_just_the_first() -> None:
    found = problems_of(
        once(
            schedule="61 2 * * *",
            timeZone="Europe/Berlín",
            lock={"atLeastFor": "20m"},
            election={"leaseDuration": "5s"},
            history={"succeeded": -1},
        )
    )
    assert set(found) == {
        "spec.schedule",
        "spec.timeZone",
        "spec.lock.atLeastFor",
        "spec.election.renewDeadline",
        "spec.history.succeeded",
    }
    assert found["spec.schedule"].value == "61 2 * * *"
    assert found["spec.timeZone"].value == "Europe/Berlín"


def test_the_error_text_lists_every_problem() -> None:
    with pytest.raises(SpecError) as caught:
        validate_resource(once(jitter="2m", suspend="yes"))
    text = str(caught.value)
    assert "spec.jitter: '2m' must be less than spec.startingDeadline ('1m')" in text
    assert "spec.suspend: 'yes' must be true or false" in text


@pytest.mark.parametrize(
    ("spec", "path", "value", "message"),
    [
        ({"bucket": "once-per-tick"}, "spec.schedule", MISSING, "is required unless"),
        ({"bucket": "every-replica"}, "spec.schedule", MISSING, "is required unless"),
        (
            {"bucket": "single-owner", "schedule": "@every 5s"},
            "spec.schedule",
            "@every 5s",
            "must not be set when spec.bucket is single-owner",
        ),
        ({"bucket": "twice"}, "spec.bucket", "twice", "must be one of 'every-replica'"),
        ({"schedule": "@hourly"}, "spec.bucket", MISSING, "is required"),
        (
            {"bucket": "every-replica", "schedule": "@hourly", "coordination": "Leader"},
            "spec.coordination",
            "Leader",
            "was removed: every once-per-tick job is claimed through its group's shard Leases",
        ),
        (
            {"bucket": "single-owner", "election": {"renewDeadline": "15s"}},
            "spec.election.renewDeadline",
            "15s",
            "must be at least '1s' less than spec.election.leaseDuration ('15s')",
        ),
        (
            {"bucket": "single-owner", "election": {"renewDeadline": "12s", "retryPeriod": "10s"}},
            "spec.election.retryPeriod",
            "10s",
            "1.2 x retryPeriod must be less than spec.election.renewDeadline ('12s')",
        ),
        (
            {"bucket": "single-owner", "election": {"leaseDuration": "2h"}},
            "spec.election.leaseDuration",
            "2h",
            "must be at most '1h'",
        ),
        (
            {"bucket": "single-owner", "election": {"leaseDuration": "1500ms"}},
            "spec.election.leaseDuration",
            "1500ms",
            "whole number of seconds",
        ),
        (
            {"bucket": "single-owner", "election": {"retryPeriod": "10ms"}},
            "spec.election.retryPeriod",
            "10ms",
            "must be at least '100ms'",
        ),
    ],
)
def test_rules_name_the_field_and_the_value(
    spec: dict[str, Any], path: str, value: Any, message: str
) -> None:
    problem = only_problem(resource(spec))
    assert (problem.path, problem.value) == (path, value)
    assert message in problem.message


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("startingDeadline", "0s", "must be at least '1s'"),
        ("startingDeadline", "8d", "is not a duration"),
        ("startingDeadline", "200h", "must be at most '168h'"),
        ("startingDeadline", 60, "must be a duration string such as '90s'"),
        ("startingDeadline", "-5s", "is not a duration"),
        ("jitter", "1 s", "is not a duration"),
        ("timeZone", "Mars/Olympus", "not a known IANA time zone"),
        ("timeZone", "", "not an IANA time zone"),
        ("group", "billing api", "must be a label value"),
        ("group", "x" * 64, "at most 63 characters"),
        ("handler", "send invoices", "must not contain whitespace"),
        ("handler", "", "must not be empty"),
        ("schedule", "0 0 30 2 *", "never matches a date"),
        ("schedule", "@every 250ms", "whole number of seconds"),
        ("onStoreUnavailable", "RunAnyway", "must be one of 'Skip' or 'RunLocally'"),
        ("suspend", "false", "must be true or false"),
        ("lock", "15m", "must be a mapping"),
        ("catchUp", {"policy": "Some"}, "must be one of 'None', 'Latest' or 'All'"),
        ("catchUp", {"maxTicks": 0}, "must be at least 1"),
        ("history", {"failed": 1001}, "must be at most 1000"),
        ("history", {"failed": "3"}, "must be an integer"),
        ("history", {"faild": 3}, "is not a known field"),
        ("timezone", "UTC", "is not a known field (check its spelling)"),
        ("time_zone", "UTC", "is not a known field"),
    ],
)
def test_field_checks_report_the_offending_value(field: str, value: Any, message: str) -> None:
    found = problems_of(once(**{field: value}))
    assert len(found) == 1, found
    problem = next(iter(found.values()))
    assert problem.path.startswith(f"spec.{field}")
    assert message in problem.message
    assert problem.value is not MISSING


def test_absurd_lock_durations_are_refused() -> None:
    assert "at most '168h'" in only_problem(once(lock={"atMostFor": "8760h"})).message
    assert "at least '1s'" in only_problem(once(lock={"atMostFor": "0s"})).message


def test_the_api_version_kind_and_name_are_checked_too() -> None:
    obj = once()
    obj["apiVersion"] = "leasecron.dev/v1"
    obj["kind"] = "ScheduledJobs"
    obj["metadata"] = {"name": "Nightly_Report"}
    found = problems_of(obj)
    assert set(found) == {"apiVersion", "kind", "metadata.name"}
    assert str(found["apiVersion"]) == (
        "apiVersion: 'leasecron.dev/v1' must be leasecron.dev/v1alpha1"
    )


def test_a_missing_spec_or_metadata_name_is_reported() -> None:
    found = problems_of(
        {"apiVersion": "leasecron.dev/v1alpha1", "kind": "ScheduledJob", "metadata": {}}
    )
    assert set(found) == {"metadata.name", "spec"}
    assert str(found["spec"]) == "spec: is required"


def test_a_document_that_is_not_a_mapping_is_refused() -> None:
    assert only_problem(["not", "a", "job"]).message == "must be a mapping"


def test_long_values_are_shortened_in_messages() -> None:
    problem = only_problem(once(handler="h" * 300))
    assert len(str(problem)) < 200
    assert problem.value == "h" * 300  # the problem keeps the whole value


def test_the_single_owner_bucket_needs_no_schedule() -> None:
    job = validate_resource(resource({"bucket": "single-owner"}))
    assert job.spec.schedule is None


@pytest.mark.parametrize("value", ["Leader", "anything"])
def test_the_removed_coordination_field_is_refused_with_a_value_other_than_lock(value: str) -> None:
    problem = only_problem(once(coordination=value))
    assert (problem.path, problem.value) == ("spec.coordination", value)
    assert str(problem).startswith(f"spec.coordination: {value!r} was removed: ")
    assert "`leasecron shards GROUP --count 1`" in problem.message


def test_a_removed_field_does_not_hide_the_other_problems_of_the_spec() -> None:
    found = problems_of(once(coordination="Leader", jitter="2m"))
    assert set(found) == {"spec.coordination", "spec.jitter"}


def test_coordination_lock_the_old_default_is_accepted_and_ignored() -> None:
    """Objects stored with the old CRD's default keep running: Lock is what every
    once-per-tick job gets now."""
    job = validate_resource(once(coordination="Lock"))
    assert "coordination" not in job.spec.model_dump()


def test_a_once_per_tick_job_keeps_its_lock_settings() -> None:
    lock = {"atMostFor": "5m", "atLeastFor": "10s", "keepAlive": False}
    spec = validate_resource(once(lock=lock, onStoreUnavailable="RunLocally")).spec
    assert (spec.lock.at_most_for, spec.lock.at_least_for, spec.lock.keep_alive) == (
        timedelta(minutes=5),
        timedelta(seconds=10),
        False,
    )


def test_the_limits_themselves_are_accepted() -> None:
    job = validate_resource(
        once(
            lock={"atMostFor": "168h", "atLeastFor": "168h"},
            election={"leaseDuration": "1h", "renewDeadline": "12001ms", "retryPeriod": "10s"},
            startingDeadline="1s",
            jitter="999ms",
        )
    )
    assert job.spec.lock.at_least_for == job.spec.lock.at_most_for


@pytest.mark.parametrize(("lease", "renew"), [("3s", "2500ms"), ("2s", "1.5s"), ("1s", "500ms")])
def test_an_election_margin_under_one_second_names_both_values_and_client_go(
    lease: str, renew: str
) -> None:
    problem = only_problem(
        once(election={"leaseDuration": lease, "renewDeadline": renew, "retryPeriod": "100ms"})
    )
    assert (problem.path, problem.value) == ("spec.election.renewDeadline", renew)
    text = str(problem)
    assert f"spec.election.leaseDuration ('{lease}')" in text
    assert "client-go" in text and "1-second resolution" in text


def test_an_election_margin_of_exactly_one_second_is_valid() -> None:
    election = {"leaseDuration": "3s", "renewDeadline": "2s", "retryPeriod": "500ms"}
    assert validate_resource(once(election=election)).spec.election.renew_deadline.seconds == 2
