"""Run requests: a JobRun that asks for a run (`leasecron run`, `leasecron backfill`) instead
of recording one, and the pure rules around it.

A request is the per-tick JobRun of its tick (`<job>-<yyyymmddhhmmss>`) created with
`spec.trigger` Manual or Backfill, `spec.requestedBy`, no holder and `status.outcome: Pending`,
labelled `leasecron.dev/trigger` so that replicas watch only requests. A replica picks it up
with one resourceVersion-conditional merge patch (`pickup_patch`) that sets holder, fencing
token and start and makes it Running: of two replicas only one patch lands. A request nobody
picked up within the job's startingDeadline after it was made is finished `Missed` by the
operator (`expired`, `expiry_patch`), conditional on its version too.

Which ticks a backfill runs (`backfill_ticks`) and which jobs take requests at all
(`request_refusal`) are decided here too. Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from leasecron.models._enums import Bucket, Outcome, Trigger
from leasecron.models._jobruns import Attempt, JobRun, JobRunSpec, JobRunStatus
from leasecron.models.durations import format_duration
from leasecron.models.names import LABEL_TRIGGER, TRIGGER_RETRY, format_tick, jobrun_name
from leasecron.models.schedules import Schedule

REQUEST_TRIGGERS = (Trigger.MANUAL, Trigger.BACKFILL)
REQUEST_SELECTOR = (
    f"{LABEL_TRIGGER} in ({','.join([*(t.value for t in REQUEST_TRIGGERS), TRIGGER_RETRY])})"
)
"""The label selector of every request JobRun, handed-over retries too (what replicas
watch)."""
DEFAULT_BACKFILL_LIMIT = 100
REQUEST_TICK_SEARCH = 60
"""Seconds from the request's time searched for one that is not a tick of the schedule."""


def request_body(
    *,
    job: str,
    job_uid: str | None,
    namespace: str,
    tick: datetime,
    trigger: Trigger,
    requested_by: str,
) -> dict[str, Any]:
    """The Pending JobRun that asks for a run of `tick` of `job`, owned by the job."""
    if trigger not in REQUEST_TRIGGERS:
        raise ValueError(f"trigger {trigger!r} is not a request's (Manual or Backfill)")
    run = JobRun(
        name=jobrun_name(job, tick),
        namespace=namespace,
        spec=JobRunSpec(job=job, tick=tick, trigger=trigger, requested_by=requested_by or None),
        status=JobRunStatus(outcome=Outcome.PENDING),
    )
    body = run.to_resource(job_uid=job_uid)
    body["metadata"]["labels"][LABEL_TRIGGER] = trigger.value
    return body


@dataclass(frozen=True, kw_only=True)
class Request:
    """A request JobRun as read: what the replicas and the operator act on."""

    name: str
    job: str
    tick: datetime
    trigger: Trigger
    requested_by: str
    outcome: Outcome
    holder: str
    resource_version: str
    created: datetime | None
    attempts: tuple[Attempt, ...] = ()
    """A handed-over retry's attempts so far (`models.handover`); () for a request."""
    retry: bool = False
    """A handed-over retry: Pending again, the vanished holder still in its spec."""

    @property
    def pending(self) -> bool:
        """Nobody picked it up yet."""
        return self.outcome is Outcome.PENDING and (self.retry or not self.holder)


def read_request(obj: Mapping[str, Any], *, created: datetime | None = None) -> Request | None:
    """The Request of a raw JobRun, None when it is not a readable request."""
    try:
        run = JobRun.from_resource(obj)
    except ValueError:
        return None
    spec = run.spec
    metadata = obj.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    retry = isinstance(labels, Mapping) and labels.get(LABEL_TRIGGER) == TRIGGER_RETRY
    if (not retry and spec.trigger not in REQUEST_TRIGGERS) or spec.tick is None:
        return None
    version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return Request(
        name=run.name,
        job=spec.job,
        tick=spec.tick,
        attempts=run.status.attempts or (),
        retry=retry,
        trigger=Trigger(spec.trigger or Trigger.SCHEDULE),
        requested_by=spec.requested_by or "",
        outcome=run.status.outcome,
        holder=spec.holder,
        resource_version=str(version or ""),
        created=created,
    )


def pickup_patch(request: Request, *, holder: str, token: int, start: datetime) -> dict[str, Any]:
    """The merge patch that makes `request` this replica's run, conditional on the version
    it was read at: holder, fencing token, start and `Running`."""
    spec = JobRunSpec(job=request.job, tick=request.tick, holder=holder, fencing_token=token)
    spec = spec.model_copy(update={"start": start})
    fields = spec.to_dict()
    status: dict[str, Any] = {"outcome": Outcome.RUNNING.value}
    if request.retry:
        # The next attempt, Running, with the earlier ones: a death of this holder during it
        # is not handed over again.
        marked = (*request.attempts, Attempt(start=start, outcome=Outcome.RUNNING))
        status["attempts"] = [a.to_dict() for a in marked]
        status["message"] = f"attempt {len(marked)} running on {holder}"
    return {
        "metadata": {"resourceVersion": request.resource_version},
        "spec": {k: fields[k] for k in ("holder", "fencingToken", "start")},
        "status": status,
    }


def expired(request: Request, *, now: datetime, starting_deadline: timedelta) -> bool:
    """Whether `request` waited for a replica longer than the job's startingDeadline (from
    its creation: a backfill's tick is long past)."""
    return (
        request.pending
        and not request.retry
        and request.created is not None
        and now > request.created + starting_deadline
    )


def expiry_message(request: Request, *, handler: str, starting_deadline: timedelta) -> str:
    return (
        f"No live replica with handler {handler} picked up this {request.trigger.value} "
        f"request within startingDeadline {format_duration(starting_deadline)}."
    )


def expiry_patch(request: Request, *, end: datetime, message: str) -> dict[str, Any]:
    """Finish a request nobody picked up as `Missed`, conditional on its version."""
    status = JobRunStatus(outcome=Outcome.MISSED, end=end, message=message).to_dict()
    return {"metadata": {"resourceVersion": request.resource_version}, "status": status}


def request_tick(schedule: Schedule | None, *, now: datetime) -> datetime | None:
    """The tick of a run requested at `now`: the first whole second from `now` on that is
    not a tick of the job's schedule (whose run would take the same JobRun name), within a
    minute; None when every second is one."""
    second = now.replace(microsecond=0)
    for offset in range(REQUEST_TICK_SEARCH):
        tick = second + timedelta(seconds=offset)
        if schedule is None or schedule.next_after(tick - timedelta(microseconds=1)) != tick:
            return tick
    return None


def request_refusal(*, bucket: Bucket, job: str) -> str | None:
    """Why `job` takes no run requests (None: it does)."""
    if bucket is Bucket.SINGLE_OWNER:
        return (
            f"{job} is single-owner: it has no ticks to run; its handler runs as long as one "
            f"replica owns it. To restart it, end the owner's term (for instance delete the "
            f"owner's pod): another replica takes over at once."
        )
    if bucket is Bucket.EVERY_REPLICA:
        return (
            f"{job} is every-replica: it runs on every replica at each tick and keeps no run "
            f"records, so a single requested run has nowhere to go. Restart the replicas, or "
            f"move the work to a once-per-tick job."
        )
    return None


@dataclass(frozen=True, kw_only=True)
class BackfillPlan:
    """The ticks of a range: those to run, and those already on record (by name)."""

    run: tuple[datetime, ...]
    on_record: tuple[tuple[datetime, str], ...]
    """(tick, outcome) of the ticks skipped because a run of them is on record."""
    replaces_missed: frozenset[datetime]
    """Ticks of `run` whose Missed record the backfill replaces."""


class TooManyTicks(ValueError):
    """The range holds more ticks than the limit."""


def backfill_ticks(
    schedule: Schedule,
    *,
    start: datetime,
    end: datetime,
    limit: int,
    outcomes: Mapping[str, str],
    job: str,
    latest: datetime | None = None,
) -> BackfillPlan:
    """The ticks of `schedule` in [start, end] up to `latest`, in order, minus those with a
    run on record: `outcomes` maps JobRun names to their outcome; any outcome but Missed
    counts as a run (a Pending request too), a Missed record is what a backfill is for.
    `latest` (now - startingDeadline) keeps out the ticks the schedule itself may still
    start. TooManyTicks when the range holds more than `limit` ticks."""
    if end < start:
        raise ValueError(f"--to {format_tick(end)} is before --from {format_tick(start)}")
    upto = end if latest is None else min(end, latest)
    ticks = schedule.ticks_between(start - timedelta(microseconds=1), upto, limit=limit + 1)
    if len(ticks) > limit:
        raise TooManyTicks(
            f"the range holds more than {limit} ticks of {schedule.expression!r}; "
            f"narrow it or raise --limit"
        )
    run: list[datetime] = []
    skipped: list[tuple[datetime, str]] = []
    missed: set[datetime] = set()
    for tick in ticks:
        outcome = outcomes.get(jobrun_name(job, tick))
        if outcome is None or outcome == Outcome.MISSED.value:
            run.append(tick)
            if outcome is not None:
                missed.add(tick)
        else:
            skipped.append((tick, outcome or "(none)"))
    return BackfillPlan(run=tuple(run), on_record=tuple(skipped), replaces_missed=frozenset(missed))
