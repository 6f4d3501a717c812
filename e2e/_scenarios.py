"""The real-pod scenarios, for any cluster that runs pods: the install guide's way in (image, chart,
example jobs, app RBAC, example app) and what the chart and the example app promise once they
run. Every check is made from outside, through the API and the replicas' effects (the JSON
lines the example app prints per run, the JobRuns, the Leases).

Used by e2e/test_real_pods.py (a `leasecron.testing.NodeCluster` on this machine) and
e2e/test_kind.py (kind, where its node image can be had); a cluster is anything with the
`Cluster` methods. The example's jobs and Deployment are read from the repository, not
repeated here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

import yaml

from _containers import ROOT
from leasecron.testing import poll

CHART = ROOT / "charts" / "leasecron"
JOBS = ROOT / "examples" / "jobs"
APP = ROOT / "examples" / "app" / "example-app.yaml"
APP_VALUES = ROOT / "examples" / "app" / "values.yaml"
RELEASE, RELEASE_NAMESPACE = "leasecron", "leasecron-system"
OPERATOR = f"{RELEASE}-operator"  # the chart's full name for a release called leasecron
APP_NAMESPACE = "example-app"
APP_SELECTOR = "app.kubernetes.io/name=example-app"
OPERATOR_SELECTOR = "app.kubernetes.io/component=operator"


class Cluster(Protocol):
    """What the scenarios need of a cluster."""

    kubeconfig: Path

    def kubectl(self, *args: str, input: str | None = None) -> str: ...

    def helm(self, *args: str) -> str: ...

    def kill_container(self, container_id: str) -> None: ...


def containerd_name(image: str) -> str:
    """`image` as a container runtime names it (`leasecron/operator:1` is
    `docker.io/leasecron/operator:1`)."""
    first = image.split("/", 1)[0]
    if "/" in image and ("." in first or ":" in first or first == "localhost"):
        return image
    return f"docker.io/{image}" if "/" in image else f"docker.io/library/{image}"


def default_images() -> list[str]:
    """The images the chart's default values and the example app's Deployment run."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    image = values["image"]
    names = [f"{image['repository']}:{image['tag'] or chart['appVersion']}"]
    for obj in yaml.safe_load_all(APP.read_text()):
        if obj and obj["kind"] == "Deployment":
            names += [c["image"] for c in obj["spec"]["template"]["spec"]["containers"]]
    return sorted({containerd_name(n) for n in names})


def app_jobs() -> list[dict[str, Any]]:
    """The example's ScheduledJobs, as in examples/jobs/."""
    found = []
    for path in sorted(JOBS.glob("*.yaml")):
        found += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return found


def get_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", *args, "-o", "json"))


def pods(cluster: Cluster, namespace: str, selector: str) -> list[dict[str, Any]]:
    """Pods of `selector` that are not being deleted."""
    items = get_json(cluster, "pods", "-n", namespace, "-l", selector)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return bool(statuses) and all(s.get("ready") for s in statuses)


def restarts(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(int(s.get("restartCount") or 0) for s in statuses)


def lease(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The Lease's spec ({} when it does not exist)."""
    out = cluster.kubectl("get", "lease", name, "-n", namespace, "--ignore-not-found", "-o", "json")
    return dict(json.loads(out).get("spec") or {}) if out.strip() else {}


def parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


# --- the replicas' effects ------------------------------------------------------------------


@dataclass
class RunLog:
    """Every JSON line the example app's pods print, followed from the moment each container
    runs until it ends (`kubectl logs -f` per container instance), so the lines of deleted
    pods are kept and a container restarted in its pod (a SIGKILL, an OOM kill) is followed
    again. A stream that ends while its container still runs is opened again; lines already
    read are not counted twice. Each line gets its `pod` and its `container` (the instance's
    containerID)."""

    cluster: Cluster
    kubectl: Sequence[str]
    namespace: str = APP_NAMESPACE
    selector: str = APP_SELECTOR
    lines: list[dict[str, Any]] = field(default_factory=list)
    _followed: dict[str, subprocess.Popen[str]] = field(default_factory=dict)
    """Container instance -> the `kubectl logs -f` following it now."""
    _processes: list[subprocess.Popen[str]] = field(default_factory=list)
    """Every `kubectl logs -f` started, ended or not (all are reaped on exit)."""
    _watcher: threading.Thread | None = None
    _started: dict[str, float] = field(default_factory=dict)
    """Container instance -> when its last follower started (monotonic)."""
    _seen: set[tuple[str, str]] = field(default_factory=set)
    _readers: list[threading.Thread] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> RunLog:
        self._watcher = threading.Thread(target=self._watch, daemon=True, name="runlog")
        self._watcher.start()
        return self

    def __exit__(self, *_: object) -> None:
        """Stop the watch first (it starts followers), then end and reap every follower."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(60)
        for process in self._processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        for reader in self._readers:
            reader.join(5)
        for process in self._processes:
            if process.stdout is not None:
                process.stdout.close()

    def _watch(self) -> None:
        while not self._stop.wait(0.3):
            try:
                found = pods(self.cluster, self.namespace, self.selector)
            except (AssertionError, subprocess.SubprocessError, ValueError):
                continue
            for pod in found:
                name = pod["metadata"]["name"]
                for status in (pod.get("status") or {}).get("containerStatuses") or []:
                    container = status.get("containerID") or ""
                    if not container or "running" not in (status.get("state") or {}):
                        continue
                    following = self._followed.get(container)
                    if following is not None and following.poll() is None:
                        continue
                    if time.monotonic() - self._started.get(container, -10.0) < 2.0:
                        continue  # its stream just ended: a new kubectl at most every 2 s
                    self._started[container] = time.monotonic()
                    self._follow(name, status["name"], container)

    def _follow(self, pod: str, name: str, container: str) -> None:
        """`kubectl logs -f` of the pod's container. Should the container be replaced
        between the listing and this call, the lines read are the new instance's under the
        old one's ID; they are not counted again when the new instance is followed (`_seen`)."""
        if self._stop.is_set():
            return
        process = subprocess.Popen(
            [*self.kubectl, "logs", "-f", "-n", self.namespace, pod, "-c", name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._processes.append(process)
        self._followed[container] = process
        reader = threading.Thread(target=self._read, args=(pod, container, process), daemon=True)
        reader.start()
        self._readers.append(reader)

    def _read(self, pod: str, container: str, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if not line.startswith("{"):
                continue
            try:
                event = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                if (pod, line) in self._seen:
                    continue
                self._seen.add((pod, line))
                self.lines.append({**event, "pod": pod, "container": container})

    def runs(self, job: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.lines if e.get("event") == "run" and e.get("job") == job]

    def ticks(self, job: str) -> dict[datetime, list[str]]:
        """Tick -> the replicas that ran it."""
        found: dict[datetime, list[str]] = {}
        for event in self.runs(job):
            found.setdefault(parse_time(event["tick"]), []).append(event["replica"])
        return found


def once_per_tick_jobs() -> list[str]:
    return [j["metadata"]["name"] for j in app_jobs() if j["spec"]["bucket"] == "once-per-tick"]


def single_owner_jobs() -> list[dict[str, Any]]:
    return [j for j in app_jobs() if j["spec"]["bucket"] == "single-owner"]


def jobruns(cluster: Cluster, namespace: str = APP_NAMESPACE) -> list[dict[str, Any]]:
    return list(get_json(cluster, "jobruns", "-n", namespace)["items"])


def assert_every_tick_ran_once_or_was_alarmed(
    cluster: Cluster, log: RunLog, job: str, *, since: datetime, until: datetime
) -> dict[datetime, list[str]]:
    """No tick of `job` in [since, until] ran on two replicas; every tick of it that did not
    run has a Missed JobRun. The ticks that ran."""
    runs = {t: r for t, r in log.ticks(job).items() if since <= t <= until}
    twice = {t: r for t, r in runs.items() if len(r) > 1}
    assert not twice, f"{job}: ticks run more than once: {twice}"
    step = schedule_step(job)

    def unaccounted() -> list[datetime]:
        records = jobruns(cluster)
        missed = {
            parse_time(r["spec"]["tick"])
            for r in records
            if r["spec"]["job"] == job and (r.get("status") or {}).get("outcome") == "Missed"
        }
        tick, found = since, []
        while tick <= until:
            if tick not in runs and tick not in missed:
                found.append(tick)
            tick += step
        return found

    # A tick nobody ran is recorded Missed once its starting deadline and the operator's
    # grace for the record have passed: give it that long.
    try:
        poll(lambda: not unaccounted(), timeout=30, what=f"{job}: every tick run or alarmed")
    except AssertionError:
        raise AssertionError(f"{job}: ticks neither run nor alarmed: {unaccounted()}") from None
    return runs


def schedule_step(job: str) -> timedelta:
    """The interval of an `@every Ns` job of the example."""
    (spec,) = [j["spec"] for j in app_jobs() if j["metadata"]["name"] == job]
    every = str(spec["schedule"]).removeprefix("@every ").strip()
    assert every.endswith("s"), f"{job}: the scenarios need an @every schedule, not {every}"
    return timedelta(seconds=float(every[:-1]))


def tick_floor(moment: datetime, step: timedelta) -> datetime:
    """The first tick at or after `moment` of an `@every step` schedule (ticks are multiples
    of the step since the epoch)."""
    seconds = step.total_seconds()
    value = -(-moment.timestamp() // seconds) * seconds
    return datetime.fromtimestamp(value, UTC)


# --- 1: the install guide's way in ----------------------------------------------------------------


def leasecron_cli() -> list[str]:
    return [str(Path(sys.executable).parent / "leasecron")]


def install_the_readme_way(cluster: Cluster) -> None:
    """Steps 2 to 5 of "From nothing to a running cluster" (docs/how-to/helm.md), with the chart's
    default values (the image is already in the cluster under its default name)."""
    cluster.helm("install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--create-namespace")
    wait_operator_rollout(cluster)
    cluster.kubectl("create", "namespace", APP_NAMESPACE)
    validated = subprocess.run(
        [*leasecron_cli(), "validate", "-R", str(JOBS)], capture_output=True, text=True
    )
    assert validated.returncode == 0, validated.stdout + validated.stderr
    cluster.kubectl("apply", "-n", APP_NAMESPACE, "-f", str(JOBS))
    cluster.helm(
        "upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--reuse-values",
        "-f", str(APP_VALUES), "--wait", "--timeout", "3m",
    )  # fmt: skip
    cluster.kubectl("apply", "-n", APP_NAMESPACE, "-f", str(APP))
    cluster.kubectl(
        "-n", APP_NAMESPACE, "rollout", "status", "deployment/example-app", "--timeout=180s"
    )


def wait_operator_rollout(cluster: Cluster) -> None:
    """`kubectl rollout status` of the operator, failing at once, with the crashed
    container's last lines, when an operator container restarts."""

    def rolled_out() -> bool:
        for pod in operator_pods(cluster):
            if restarts(pod):
                name = pod["metadata"]["name"]
                previous = cluster.kubectl(
                    "logs", "-n", RELEASE_NAMESPACE, name, "--previous", "--tail=30"
                )
                raise AssertionError(f"operator pod {name} restarted:\n{previous}")
        deployment = get_json(cluster, "deployment", OPERATOR, "-n", RELEASE_NAMESPACE)
        status = deployment.get("status") or {}
        wanted = deployment["spec"]["replicas"]
        return bool(
            status.get("observedGeneration") == deployment["metadata"]["generation"]
            and status.get("updatedReplicas") == wanted
            and status.get("availableReplicas") == wanted
            and not status.get("unavailableReplicas")
        )

    poll(rolled_out, timeout=180, what="the operator rolled out")
    cluster.kubectl(
        "-n", RELEASE_NAMESPACE, "rollout", "status", f"deployment/{OPERATOR}", "--timeout=60s"
    )


def operator_pods(cluster: Cluster) -> list[dict[str, Any]]:
    return pods(cluster, RELEASE_NAMESPACE, OPERATOR_SELECTOR)


def election_holder(cluster: Cluster) -> str:
    return str(lease(cluster, RELEASE_NAMESPACE, OPERATOR).get("holderIdentity") or "")


def assert_one_operator_leads_without_restarts(cluster: Cluster) -> str:
    """The operator's replicas (as many as the Deployment asks) are Ready, none restarted,
    one holds the election Lease. The leader's pod name."""
    wanted = int(
        get_json(cluster, "deployment", OPERATOR, "-n", RELEASE_NAMESPACE)["spec"]["replicas"]
    )
    running = poll(
        lambda: (found := operator_pods(cluster)) and len(found) == wanted
        and all(ready(p) for p in found) and found,
        timeout=90,
        what=f"{wanted} operator replicas Ready",
    )  # fmt: skip
    assert [restarts(p) for p in running] == [0] * wanted, [
        (p["metadata"]["name"], restarts(p)) for p in running
    ]
    names = [p["metadata"]["name"] for p in running]
    # After a rollout the Lease may still name a replica that is gone until a new one leads.
    leaders = poll(
        lambda: [n for n in names if election_holder(cluster).startswith(n)],
        timeout=60,
        what=f"one of {names} leading",
    )
    assert len(leaders) == 1, (election_holder(cluster), names)
    return leaders[0]


def job_lease_name(job: str) -> str:
    from leasecron.models.names import job_lease_name as name

    return name(job)


def single_owner_copy(job: dict[str, Any], name: str) -> dict[str, Any]:
    """Another single-owner job running the same handler (a second job in the namespace)."""
    copy = json.loads(json.dumps(job))
    copy["metadata"] = {"name": name}
    copy["spec"].setdefault("handler", job["metadata"]["name"])
    return copy


def lease_token(cluster: Cluster, job: str) -> int:
    return int(lease(cluster, APP_NAMESPACE, job_lease_name(job)).get("leaseTransitions") or 0)


def floors(cluster: Cluster) -> dict[str, str]:
    from leasecron.coordination.floors import FLOORS_LEASE

    out = cluster.kubectl(
        "get", "lease", FLOORS_LEASE, "-n", APP_NAMESPACE, "--ignore-not-found", "-o", "json"
    )
    return dict(json.loads(out)["metadata"].get("annotations") or {}) if out.strip() else {}


def operator_logs(cluster: Cluster) -> str:
    return cluster.kubectl(
        "logs", "-n", RELEASE_NAMESPACE, "-l", OPERATOR_SELECTOR, "--tail=-1", "--prefix"
    )


def _diagnosis(cluster: Cluster, jobs: list[str]) -> str:
    """What a failed wait on `jobs` needs to be understood: their Leases and the app's log
    lines that name them."""
    leases = {j: lease(cluster, APP_NAMESPACE, job_lease_name(j)) for j in jobs}
    logs = cluster.kubectl(
        "logs", "-n", APP_NAMESPACE, "-l", APP_SELECTOR, "--tail=400", "--prefix"
    )
    lines = [line for line in logs.splitlines() if any(j in line for j in jobs)]
    return f"leases: {leases}\napp log lines naming them:\n" + "\n".join(lines[-60:])


def delete_and_apply_two_jobs_again(cluster: Cluster) -> dict[str, tuple[int, int]]:
    """Scenario 1's second half: two single-owner jobs in one namespace (the example's and a
    copy) have handed out tokens; both are deleted together, the operator's pods are deleted,
    both are applied again. {job: (last token before, first token after)}; fails when a floor
    is not recorded, the operator met a 403, or a token did not continue above its last."""
    (original,) = single_owner_jobs()
    second = single_owner_copy(original, f"{original['metadata']['name']}-b")
    cluster.kubectl("apply", "-n", APP_NAMESPACE, "-f", "-", input=yaml.safe_dump(second))
    names = [original["metadata"]["name"], second["metadata"]["name"]]
    poll(
        lambda: all(lease(cluster, APP_NAMESPACE, job_lease_name(n)).get("holderIdentity")
                    for n in names),
        timeout=60,
        what=f"{names} owned (a token handed out: the first term's is 0)",
    )  # fmt: skip
    before = {n: lease_token(cluster, n) for n in names}
    cluster.kubectl("delete", "scheduledjob", "-n", APP_NAMESPACE, *names, "--timeout=60s")
    from leasecron.coordination.floors import tombstone_key

    recorded = floors(cluster)
    for name in names:
        assert int(recorded.get(tombstone_key(name), "0")) >= before[name], (name, recorded)
    logs = operator_logs(cluster)
    assert "Forbidden" not in logs and "token floor not recorded" not in logs, logs[-3000:]
    # The operator's pods go too (the floors must not live in its memory).
    cluster.kubectl("delete", "pod", "-n", RELEASE_NAMESPACE, "-l", OPERATOR_SELECTOR, "--wait")
    poll(
        lambda: not any(job_lease_name(n) in cluster.kubectl("get", "lease", "-n", APP_NAMESPACE)
                        for n in names),
        timeout=60,
        what="the deleted jobs' Leases collected",
    )  # fmt: skip
    assert_one_operator_leads_without_restarts(cluster)
    cluster.kubectl("apply", "-n", APP_NAMESPACE, "-f", str(JOBS / f"{names[0]}.yaml"))
    cluster.kubectl("apply", "-n", APP_NAMESPACE, "-f", "-", input=yaml.safe_dump(second))
    try:
        after = poll(
            lambda: (t := {n: lease_token(cluster, n) for n in names})
            and all(t[n] > before[n] for n in names) and t,
            timeout=60,
            what=f"{names} owned again above their last tokens {before}",
        )  # fmt: skip
    except AssertionError as e:
        raise AssertionError(f"{e}\n{_diagnosis(cluster, names)}") from None
    cluster.kubectl("delete", "scheduledjob", "-n", APP_NAMESPACE, names[1], "--timeout=60s")
    return {n: (before[n], after[n]) for n in names}


# --- 3: handover and takeover of a single-owner job ----------------------------------------


@dataclass(frozen=True)
class Change:
    """One observed state of a job's Lease."""

    at: float
    holder: str
    transitions: int
    acquire: datetime | None
    renew: datetime | None
    duration: float


def _change(spec: dict[str, Any]) -> Change:
    def when(key: str) -> datetime | None:
        value = spec.get(key)
        return parse_time(value) if value else None

    return Change(
        at=time.time(),
        holder=str(spec.get("holderIdentity") or ""),
        transitions=int(spec.get("leaseTransitions") or 0),
        acquire=when("acquireTime"),
        renew=when("renewTime"),
        duration=float(spec.get("leaseDurationSeconds") or 0),
    )


def owner_pod(cluster: Cluster, job: str) -> tuple[dict[str, Any], Change]:
    """The pod holding `job`'s Lease, and the Lease as seen then."""

    def held() -> tuple[dict[str, Any], Change] | None:
        seen = _change(lease(cluster, APP_NAMESPACE, job_lease_name(job)))
        for pod in pods(cluster, APP_NAMESPACE, APP_SELECTOR):
            if seen.holder and seen.holder.startswith(pod["metadata"]["name"]) and ready(pod):
                return pod, seen
        return None

    return poll(held, timeout=60, what=f"{job} owned by a Ready pod")


def next_owner(cluster: Cluster, job: str, old: Change, old_pod: str) -> tuple[Change, Change]:
    """Wait for another replica (a new identity: a container restarted in `old_pod` is one)
    to own `job`; (the old owner's last record seen, the new one)."""
    last = old

    def taken() -> Change | None:
        nonlocal last
        seen = _change(lease(cluster, APP_NAMESPACE, job_lease_name(job)))
        if seen.holder == old.holder:
            last = seen
            return None
        return seen if seen.holder and seen.transitions > old.transitions else None

    new = poll(taken, timeout=90, what=f"{job} owned by another replica than {old.holder}")
    return last, new


def handover_on_delete(cluster: Cluster) -> dict[str, float]:
    """`kubectl delete pod` of the single-owner job's holder: the pod releases its Lease on
    SIGTERM, so another replica acquires it before the old grant would have expired."""
    (job,) = [j["metadata"]["name"] for j in single_owner_jobs()]
    pod, seen = owner_pod(cluster, job)
    name = pod["metadata"]["name"]
    started = time.time()
    cluster.kubectl("delete", "pod", "-n", APP_NAMESPACE, name, "--wait=false")
    last, new = next_owner(cluster, job, seen, name)
    assert last.renew is not None and new.acquire is not None
    expiry = last.renew + timedelta(seconds=last.duration)
    assert new.acquire < expiry, (
        f"{job}: taken over at {new.acquire}, after the old grant expired at {expiry}: "
        "the deleted pod did not release its Lease"
    )
    return {"handover_s": new.at - started, "grant_left_s": (expiry - new.acquire).total_seconds()}


def takeover_on_kill(cluster: Cluster, log: RunLog, kill: Any) -> dict[str, float]:
    """The holder's container killed with SIGKILL (`kill(container_id)`): it releases
    nothing, so another replica takes over once the grant expired, and within the Lease's
    duration plus the replicas' retry period after that. The kubelet restarts the container
    in its pod, and the run log follows the new instance (the later tests judge its runs)."""
    (spec,) = single_owner_jobs()
    job = spec["metadata"]["name"]
    pod, seen = owner_pod(cluster, job)
    name = pod["metadata"]["name"]
    (status,) = pod["status"]["containerStatuses"]
    started = time.time()
    kill(status["containerID"])
    last, new = next_owner(cluster, job, seen, name)
    assert last.renew is not None and new.acquire is not None
    expiry = last.renew + timedelta(seconds=last.duration)
    assert new.acquire >= expiry, f"{job}: two owners: acquired {new.acquire}, grant to {expiry}"
    late = (new.acquire - expiry).total_seconds()
    assert late <= last.duration, f"{job}: taken over {late:.1f} s after the grant expired"
    poll(
        lambda: any(
            e["pod"] == name and e.get("event") == "ready" and e["ts"] > started
            for e in list(log.lines)
        ),
        timeout=90,
        what=f"the `ready` line of {name}'s restarted container in the run log",
    )
    return {"takeover_s": new.at - started, "after_expiry_s": late}


# --- 2 and 4: a rolling update and scaling while the jobs tick ------------------------------


def assert_one_owner_at_a_time(log: RunLog, job: str) -> int:
    """The single-owner job's terms, from the replicas' own lines (`term-started`,
    `term-ended`): none starts before the previous one ended, tokens only rise. The number
    of terms."""
    last_line: dict[str, float] = {}  # container instance -> its last line's time
    with log._lock:
        for line in log.lines:
            if "ts" in line:
                instance = line["container"]
                last_line[instance] = max(last_line.get(instance, 0.0), line["ts"])
    terms: dict[tuple[str, int], list[float]] = {}
    for event in log.runs(job):
        key = (event["replica"], int(event["token"]))
        if event["outcome"] == "term-started":
            # A replica killed in its term printed no term-ended: its term ended, as far as
            # its effects go, with the last line that container printed (a restarted
            # container of the same pod is another instance).
            terms[key] = [event["ts"], last_line.get(event["container"], event["ts"])]
        elif event["outcome"] == "term-ended" and key in terms:
            terms[key][1] = event["ts"]
    ordered = sorted(terms.items(), key=lambda item: item[1][0])
    for (earlier, (_, end)), (later, (start, _)) in pairwise(ordered):
        assert later[1] > earlier[1], f"{job}: token went from {earlier} to {later}"
        assert start >= end, f"{job}: {later} started at {start} before {earlier} ended at {end}"
    return len(ordered)


def app_pod_names(cluster: Cluster) -> set[str]:
    return {p["metadata"]["name"] for p in pods(cluster, APP_NAMESPACE, APP_SELECTOR)}


def while_ticking(cluster: Cluster, log: RunLog, change: Any) -> dict[str, int]:
    """Run `change()` (a rollout, a scaling) while the example's jobs tick; then every
    once-per-tick tick in the window ran once or was alarmed, and the single-owner job never
    had two owners. {job: ticks run} and the terms of the single-owner job."""
    since = datetime.now(UTC)
    change()
    jobs = once_per_tick_jobs()
    until = datetime.now(UTC) + max(schedule_step(j) for j in jobs) * 3
    figures: dict[str, int] = {}
    for job in jobs:
        step = schedule_step(job)
        first, last = tick_floor(since, step), tick_floor(until, step) - step
        poll(
            lambda job=job, last=last: any(t >= last for t in log.ticks(job)),
            timeout=90,
            what=f"{job} run up to {last}",
        )
        figures[job] = len(
            assert_every_tick_ran_once_or_was_alarmed(cluster, log, job, since=first, until=last)
        )
    for spec in single_owner_jobs():
        figures[spec["metadata"]["name"]] = assert_one_owner_at_a_time(
            log, spec["metadata"]["name"]
        )
    return figures


def rolling_update(cluster: Cluster, log: RunLog) -> dict[str, int]:
    """Scenario 2: the app Deployment rolled with its own strategy (old and new pods side by
    side) while the jobs tick."""
    before = app_pod_names(cluster)

    def roll() -> None:
        cluster.kubectl("-n", APP_NAMESPACE, "rollout", "restart", "deployment/example-app")
        cluster.kubectl(
            "-n", APP_NAMESPACE, "rollout", "status", "deployment/example-app", "--timeout=240s"
        )

    figures = while_ticking(cluster, log, roll)
    assert not before & app_pod_names(cluster), "every pod was replaced"
    return figures


def scale(cluster: Cluster, log: RunLog, replicas: int) -> None:
    cluster.kubectl(
        "-n", APP_NAMESPACE, "scale", "deployment/example-app", f"--replicas={replicas}"
    )
    cluster.kubectl(
        "-n", APP_NAMESPACE, "rollout", "status", "deployment/example-app", "--timeout=240s"
    )
    poll(
        lambda: len(app_pod_names(cluster)) == replicas,
        timeout=120,
        what=f"{replicas} app pods (the others gone)",
    )


def scaling(cluster: Cluster, log: RunLog) -> dict[str, int]:
    """Scenario 4: 3 -> 1 -> 5 replicas while ticking; then a new replica runs work."""
    wanted = int(
        get_json(cluster, "deployment", "example-app", "-n", APP_NAMESPACE)["spec"]["replicas"]
    )
    figures = while_ticking(cluster, log, lambda: scale(cluster, log, 1))
    old = app_pod_names(cluster)
    figures.update(while_ticking(cluster, log, lambda: scale(cluster, log, 5)))
    new = app_pod_names(cluster) - old
    poll(
        lambda: {e["pod"] for e in log.lines if e.get("event") == "run"} & new,
        timeout=60,
        what=f"one of the new replicas {sorted(new)} running a job",
    )
    scale(cluster, log, wanted)
    return figures


# --- 5: the operator ------------------------------------------------------------------------


def false_missed_runs(cluster: Cluster, log: RunLog) -> list[str]:
    """Ticks recorded Missed that a replica did run."""
    found = []
    for record in jobruns(cluster):
        if (record.get("status") or {}).get("outcome") != "Missed":
            continue
        job, tick = record["spec"]["job"], parse_time(record["spec"]["tick"])
        if tick in log.ticks(job):
            found.append(f"{job} {tick.isoformat()}")
    return found


def operator_handover(cluster: Cluster, log: RunLog) -> dict[str, float]:
    """The leading operator's pod deleted, then `helm upgrade` rolling the operator: another
    replica leads each time and no tick that ran is recorded Missed."""
    leader = assert_one_operator_leads_without_restarts(cluster)
    started = time.time()
    cluster.kubectl("delete", "pod", "-n", RELEASE_NAMESPACE, leader, "--wait=false")
    poll(
        lambda: (h := election_holder(cluster)) and not h.startswith(leader),
        timeout=60,
        what=f"another operator than {leader} leading",
    )
    deleted = time.time() - started
    started = time.time()
    cluster.helm(
        "upgrade", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE, "--reuse-values",
        "--set-string", f"podAnnotations.leasecron\\.dev/rolled={int(started)}",
    )  # fmt: skip
    wait_operator_rollout(cluster)
    assert_one_operator_leads_without_restarts(cluster)
    upgraded = time.time() - started
    # Ticks after the last change are judged too: give the new leader a few of them.
    for job in once_per_tick_jobs():
        last = tick_floor(datetime.now(UTC), schedule_step(job)) + 3 * schedule_step(job)
        poll(
            lambda job=job, last=last: any(t >= last for t in log.ticks(job)),
            timeout=60,
            what=f"{job} run up to {last}",
        )
    assert not false_missed_runs(cluster, log)
    return {"leader_deleted_s": deleted, "helm_upgrade_s": upgraded}


SCRAPE = """
import json, sys, urllib.request
out = {}
for url in sys.argv[1:]:
    with urllib.request.urlopen(url, timeout=5) as r:
        out[url] = [r.status, r.read().decode()]
print(json.dumps(out))
"""


def scrape_from_inside(cluster: Cluster) -> dict[str, int]:
    """The operator's probes (/healthz, /readyz on each pod) and its metrics Service, fetched
    from an app pod, as Prometheus and the kubelet reach them."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["operator"]
    service = get_json(cluster, "service", OPERATOR, "-n", RELEASE_NAMESPACE)
    (port,) = [p["port"] for p in service["spec"]["ports"] if p["port"] == values["metricsPort"]]
    urls = [f"http://{service['spec']['clusterIP']}:{port}/metrics"]
    for pod in operator_pods(cluster):
        ip = pod["status"]["podIP"]
        urls += [
            f"http://{ip}:{values['healthPort']}/healthz",
            f"http://{ip}:{values['healthPort']}/readyz",
        ]
    (app,) = sorted(app_pod_names(cluster))[:1]
    got = json.loads(
        cluster.kubectl("exec", "-n", APP_NAMESPACE, app, "--", "python", "-c", SCRAPE, *urls)
    )
    statuses = {url: status for url, (status, _) in got.items()}
    metrics = got[urls[0]][1]
    assert "leasecron_" in metrics, metrics[:500]
    # one of the replicas is ready (the leader); each answers its liveness probe
    assert all(s == 200 for u, s in statuses.items() if u.endswith("/healthz")), statuses
    return statuses
