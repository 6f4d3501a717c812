"""`leasecron run JOB`, `leasecron suspend JOB` and `leasecron resume JOB` (also as
`kubectl leasecron ...`): a run requested now, and the job's `spec.suspend` switched.

`run` checks what it can before it writes (the job exists, is once-per-tick, is not
suspended unless `--force`, a live replica of its group registered its handler with a
Scheduler, the caller may create JobRuns; a job only `job=` guards run is refused: a guard
runs when its own scheduler fires it, so nobody would pick a request up), then creates the
request: the Pending JobRun of the current second (`models.requests`), which a replica picks
up and runs exactly once. `--wait` follows it until it finishes. Owns the wording of every
refusal and the request's creation, which `backfill` (`_backfill`) shares; the pickup is the
replicas' (`runtime._requests`).

What it does not promise: that the replica judged live when the request is made is still
there to pick it up (a request nobody picks up within startingDeadline ends Missed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import click

from leasecron.cli._kubectl import Target, mapping, target_options
from leasecron.cli._status import live_holder
from leasecron.coordination.members import advertised_handlers, member_selector
from leasecron.kube.clients import Kube
from leasecron.kube.errors import AlreadyExists, Forbidden, KubeError
from leasecron.kube.jobruns import JobRunStore
from leasecron.kube.leases import LeaseStore
from leasecron.kube.objects import ObjectStore
from leasecron.models.leases import parse_lease
from leasecron.models.names import (
    ANNOTATION_GUARD_HANDLERS,
    GROUP,
    SCHEDULEDJOB_PLURAL,
    VERSION,
    format_tick,
)
from leasecron.models.requests import request_body, request_refusal, request_tick
from leasecron.models.specs import Outcome, ScheduledJob, SpecError, Trigger

POLL_S = 0.2
"""How often a waiting command reads its JobRun again."""


class Refused(click.ClickException):
    """A refusal: one line on stderr, exit code 1."""


@dataclass(frozen=True, kw_only=True)
class JobOnRecord:
    """The job as read, with its uid (the requests' owner)."""

    job: ScheduledJob
    uid: str | None


def namespace_of(target: Target) -> str:
    if target.namespace is None:
        raise click.UsageError("a job is in one namespace: give -n, not -A")
    return target.namespace


async def read_job(kube: Kube, *, namespace: str, name: str) -> JobOnRecord:
    """The ScheduledJob `name`; Refused when it is missing or invalid."""
    store = ObjectStore(kube, group=GROUP, version=VERSION, plural=SCHEDULEDJOB_PLURAL)
    obj = await store.get(namespace=namespace, name=name)
    if obj is None:
        raise Refused(f"ScheduledJob {name} not found in namespace {namespace}")
    try:
        job = ScheduledJob.from_resource(obj)
    except SpecError as e:
        raise Refused(f"ScheduledJob {name} is not valid, so no replica runs it: {e}") from e
    return JobOnRecord(job=job, uid=mapping(obj.get("metadata")).get("uid"))


def covering_replicas(
    leases: Sequence[Mapping[str, Any]], *, handler: str, now: datetime, guards: bool = False
) -> list[str]:
    """Holders of the live member Leases (renewed within their duration by this machine's
    clock, as a person would judge them) that registered `handler` with a Scheduler (with
    `guards`: that run it only through `job=` guards), sorted."""
    live = []
    for obj in leases:
        holder = live_holder(parse_lease(obj), now)
        guarded = handler in advertised_handlers(obj, annotation=ANNOTATION_GUARD_HANDLERS)
        if holder and handler in advertised_handlers(obj) and guarded == guards:
            live.append(holder)
    return sorted(live)


def nobody_picks_up(job: ScheduledJob, *, namespace: str, guards: Sequence[str]) -> Refused:
    """The refusal of a job no live Scheduler replica runs; `guards`: the replicas that run
    it through `job=` guards only."""
    group, handler = job.spec.group, job.handler_name
    if guards:
        return Refused(
            f"{job.name} is run only by job= guards ({', '.join(guards)}): a guard runs a tick "
            f"when its own scheduler fires it and never picks up a requested run, so nobody "
            f"would run this request; register handler {handler} with a Scheduler of group "
            f"{group} to run {job.name} on request"
        )
    return Refused(
        f"no live replica of group {group} in namespace {namespace} has registered handler "
        f"{handler}, so nobody would run {job.name}"
    )


async def requester(kube: Kube, target: Target) -> str:
    """Who asks: the user a SelfSubjectReview names, else the kubeconfig context's user."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    try:
        review = await kube.request(
            "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=body
        )
        name = mapping(mapping(review.get("status")).get("userInfo")).get("username")
        if name:
            return str(name)
    except KubeError:
        pass
    return kubeconfig_user(target)


def kubeconfig_user(target: Target) -> str:
    try:
        import kubernetes.config

        contexts, active = kubernetes.config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=target.kubeconfig
        )
    except Exception:
        return "unknown"
    chosen = active
    if target.context:
        chosen = next((c for c in contexts or [] if mapping(c).get("name") == target.context), None)
    return str(mapping(mapping(chosen).get("context")).get("user") or "unknown")


async def may(kube: Kube, *, namespace: str, verb: str, resource: str, group: str) -> bool:
    """A SelfSubjectAccessReview: whether the caller may `verb` `resource` in `namespace`
    (True when the review itself cannot be made: the write then says)."""
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": namespace,
                "verb": verb,
                "group": group,
                "resource": resource,
            }
        },
    }
    try:
        review = await kube.request(
            "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body
        )
    except KubeError:
        return True
    return bool(mapping(review.get("status")).get("allowed"))


def forbidden(user: str, *, verb: str, resource: str, namespace: str) -> Refused:
    return Refused(
        f"{user} may not {verb} {resource} in namespace {namespace} (RBAC); ask for the "
        f"leasecron-runner role there (docs/rbac.md)"
    )


async def check_runnable(
    kube: Kube, on_record: JobOnRecord, *, namespace: str, force: bool, user: str
) -> list[str]:
    """Refused unless a requested run of the job can happen; the replicas that cover it."""
    job = on_record.job
    refusal = request_refusal(bucket=job.spec.bucket, job=job.name)
    if refusal is not None:
        raise Refused(refusal)
    if job.spec.suspend and not force:
        raise Refused(
            f"{job.name} is suspended: `leasecron resume {job.name}` first, or --force to "
            f"run it once anyway"
        )
    leases = await LeaseStore(kube).list(
        namespace=namespace, label_selector=member_selector(job.spec.group)
    )
    now = datetime.now(UTC)
    replicas = covering_replicas(leases, handler=job.handler_name, now=now)
    if not replicas:
        guards = covering_replicas(leases, handler=job.handler_name, now=now, guards=True)
        raise nobody_picks_up(job, namespace=namespace, guards=guards)
    if not await may(kube, namespace=namespace, verb="create", resource="jobruns", group=GROUP):
        raise forbidden(user, verb="create", resource="jobruns.leasecron.dev", namespace=namespace)
    return replicas


async def create_request(
    kube: Kube,
    on_record: JobOnRecord,
    *,
    namespace: str,
    tick: datetime,
    trigger: Trigger,
    user: str,
) -> str:
    """Create the request of `tick`; its name. Refused when a run of that tick is on record
    already, or RBAC forbids the create."""
    job = on_record.job
    body = request_body(
        job=job.name,
        job_uid=on_record.uid,
        namespace=namespace,
        tick=tick,
        trigger=trigger,
        requested_by=user,
    )
    name = str(body["metadata"]["name"])
    store = JobRunStore(kube)
    try:
        await store.create(namespace=namespace, body=body)
    except AlreadyExists as e:
        existing = await store.get(namespace=namespace, name=name) or {}
        outcome = mapping(existing.get("status")).get("outcome") or "no outcome yet"
        raise Refused(
            f"a run of {job.name} for {format_tick(tick)} is already on record: JobRun {name} "
            f"({outcome})"
        ) from e
    except Forbidden as e:
        raise forbidden(
            user, verb="create", resource="jobruns.leasecron.dev", namespace=namespace
        ) from e
    return name


async def wait_finished(
    kube: Kube,
    *,
    namespace: str,
    name: str,
    timeout: float | None,  # noqa: ASYNC109
) -> dict[str, Any] | None:
    """Read JobRun `name` until its outcome is final; the object, or None after `timeout`
    (the last one read is lost then: the caller reads it again to report)."""
    store = JobRunStore(kube)
    loop = asyncio.get_running_loop()
    end = None if timeout is None else loop.time() + timeout
    while True:
        obj = await store.get(namespace=namespace, name=name)
        outcome = mapping((obj or {}).get("status")).get("outcome")
        if obj is None or outcome not in (None, Outcome.PENDING.value, Outcome.RUNNING.value):
            return obj
        if end is not None and loop.time() >= end:
            return None
        await asyncio.sleep(POLL_S)


def describe_run(obj: Mapping[str, Any]) -> str:
    """`<name>: <outcome> (holder H, token N)` and the message, if any."""
    spec, status = mapping(obj.get("spec")), mapping(obj.get("status"))
    name = mapping(obj.get("metadata")).get("name")
    line = (
        f"{name}: {status.get('outcome') or '-'} (holder {spec.get('holder') or '-'}, "
        f"token {spec.get('fencingToken') if spec.get('fencingToken') is not None else '-'})"
    )
    message = status.get("message")
    return f"{line}: {message}" if message else line


def run_async(main: Any) -> None:
    """Run a command's coroutine; API failures become one-line errors (exit 1)."""
    try:
        asyncio.run(main)
    except KubeError as e:
        raise click.ClickException(f"the API server failed: {e}") from e


@click.command("run")
@click.argument("job")
@click.option(
    "--wait", is_flag=True, help="Follow the run until it finishes; exit 0 only if it succeeded."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.1),
    default=None,
    help="Seconds --wait waits [default: no limit].",
)
@click.option("--force", is_flag=True, help="Run a suspended job once anyway.")
@target_options
def run(job: str, wait: bool, timeout: float | None, force: bool, target: Target) -> None:
    """Ask for one run of JOB now: a live replica that registered its handler picks it up and
    runs it exactly once, under the same claim and fencing as a tick; its JobRun says Manual
    and who asked."""
    namespace = namespace_of(target)

    async def main() -> None:
        kube = target.kube()
        try:
            user = await requester(kube, target)
            on_record = await read_job(kube, namespace=namespace, name=job)
            await check_runnable(kube, on_record, namespace=namespace, force=force, user=user)
            tick = request_tick(on_record.job.spec.parsed_schedule, now=datetime.now(UTC))
            if tick is None:
                raise Refused(
                    f"every second is a tick of {job}'s schedule, so each already has its run"
                )
            name = await create_request(
                kube, on_record, namespace=namespace, tick=tick, trigger=Trigger.MANUAL, user=user
            )
            click.echo(f"jobrun/{name} requested: a run of {job} for {format_tick(tick)} by {user}")
            if not wait:
                return
            obj = await wait_finished(kube, namespace=namespace, name=name, timeout=timeout)
            if obj is None:
                raise click.ClickException(f"jobrun/{name} has not finished after {timeout:g}s")
            click.echo(describe_run(obj))
            if mapping(obj.get("status")).get("outcome") != Outcome.SUCCEEDED.value:
                raise SystemExit(1)
        finally:
            await kube.close()

    run_async(main())


def _switch(job: str, target: Target, *, suspend: bool) -> None:
    namespace = namespace_of(target)
    word = "suspended" if suspend else "resumed"

    async def main() -> None:
        kube = target.kube()
        store = ObjectStore(kube, group=GROUP, version=VERSION, plural=SCHEDULEDJOB_PLURAL)
        try:
            on_record = await read_job(kube, namespace=namespace, name=job)
            if on_record.job.spec.suspend == suspend:
                click.echo(f"scheduledjob/{job} was {word} already")
                return
            try:
                await store.patch(
                    namespace=namespace, name=job, patch={"spec": {"suspend": suspend}}
                )
            except Forbidden as e:
                user = await requester(kube, target)
                raise forbidden(
                    user, verb="patch", resource="scheduledjobs.leasecron.dev", namespace=namespace
                ) from e
            click.echo(f"scheduledjob/{job} {word}")
        finally:
            await kube.close()

    run_async(main())


@click.command("suspend")
@click.argument("job")
@target_options
def suspend(job: str, target: Target) -> None:
    """Suspend JOB: no tick of it starts until it is resumed. A run going is not stopped; a
    single-owner job's owner is."""
    _switch(job, target, suspend=True)


@click.command("resume")
@click.argument("job")
@target_options
def resume(job: str, target: Target) -> None:
    """Resume JOB: its ticks run again from the next one (those missed while suspended are
    not run; `leasecron backfill` runs them)."""
    _switch(job, target, suspend=False)


__all__ = ["resume", "run", "suspend"]
