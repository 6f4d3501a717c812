"""One pass for one job: whether its Lease must be created, and when time alone can change
its status (so that jobs with nothing to do cost nothing)."""

from __future__ import annotations

from operator_builders import START, clock, facts, lease, member, snapshot

from leasecron.operator._missed import initial_memory
from leasecron.operator._plan import MAX_RECHECK_S, plan_job


def memory_for(job):  # type: ignore[no-untyped-def]
    return initial_memory(job, previous={}, now=START, now_mono=5000.0, observed_generation=1)


OWNER = {"bucket": "single-owner", "schedule": None}


def test_a_single_owner_job_without_a_lease_gets_one_created() -> None:
    at = clock()
    job = facts(**OWNER)
    assert plan_job(job, snapshot(at), memory_for(job), previous={}).create_lease


def test_a_single_owner_job_whose_lease_exists_gets_none() -> None:
    at = clock()
    job = facts(**OWNER)
    view = snapshot(at, job_lease=lease(name="leasecron-job-report", observed_at=at.monotonic()))
    assert not plan_job(job, view, memory_for(job), previous={}).create_lease


def test_every_replica_and_once_per_tick_jobs_have_no_lease_of_their_own() -> None:
    at = clock()  # once-per-tick ticks are claimed on the group's shard Leases
    for job in (facts(bucket="every-replica"), facts()):
        assert job.job_lease is None
        assert not plan_job(job, snapshot(at), memory_for(job), previous={}).create_lease


def test_a_daily_job_is_looked_at_again_at_its_next_tick_not_every_second() -> None:
    at = clock()
    job = facts(schedule="0 13 * * *")  # next tick in one hour
    assert (
        plan_job(job, snapshot(at), memory_for(job), previous={}).recheck_at
        == at.monotonic() + MAX_RECHECK_S
    )


def test_a_frequent_job_is_looked_at_again_at_its_next_tick() -> None:
    at = clock()
    job = facts(schedule="@every 2s")
    assert (
        plan_job(job, snapshot(at), memory_for(job), previous={}).recheck_at == at.monotonic() + 2
    )


def test_an_expiring_member_lease_brings_the_recheck_forward() -> None:
    at = clock()
    job = facts(schedule="0 13 * * *")
    view = snapshot(at, members=(member("replica-a", expires_at=at.monotonic() + 7),))
    assert plan_job(job, view, memory_for(job), previous={}).recheck_at == at.monotonic() + 7
