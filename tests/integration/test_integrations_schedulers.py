"""The scheduler integrations against a real API server: three replica processes, each with
its own identity and its own real scheduler (APScheduler 3.x and 4.x, Celery beat + worker,
the `schedule` library, a plain loop) firing a 1 s job, and each tick's effect (a line
"<tick> <identity> <token>" in a shared file) happens exactly once, with tokens increasing
with the ticks.

The replicas are the scripts in `_scheduler_replicas/`; with `LEASECRON_TEST_UNGUARDED=1`
in their environment they run the job's body without the guard, and these tests fail.
In this process: APScheduler 3.x interval triggers started at other phases than the grid
(each more than its misfire grace off it) run every grid tick once, a late APScheduler 3.x
run claims the tick it was scheduled for, one past its misfire grace is skipped
(`deadline`), and `loops.run_every` on two replicas (threads with their own identities) runs
each tick it wakes for once."""

from __future__ import annotations

import asyncio
import fcntl
import functools
import hashlib
import itertools
import os
import queue
import shutil
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.schedulers.background import BackgroundScheduler
from kubernetes.client import ApiClient

from leasecron.integrations.apscheduler import guard_job, guarded
from leasecron.integrations.loops import run_every
from leasecron.kube.clients import Kube
from leasecron.runtime import aclose_guards, close_guards, current_run
from leasecron.testing import ChildProcess, poll, stop_children

pytestmark = pytest.mark.integration
REPLICAS = Path(__file__).parent / "_scheduler_replicas"
IDENTITIES = ("replica-a", "replica-b", "replica-c")
TICKS = 5
APSCHEDULER4 = "4.0.0a6"
"""The APScheduler 4 pre-release the side environment pins (it cannot share .venv with 3.x)."""
REPOSITORY = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Effect:
    tick: datetime
    identity: str
    token: str


def read_effects(path: Path) -> list[Effect]:
    if not path.exists():
        return []
    effects = []
    for line in path.read_text().splitlines():
        tick, identity, token = line.split()
        effects.append(Effect(datetime.fromisoformat(tick), identity, token))
    return effects


def run_replicas(
    argv: Sequence[str],
    *,
    kubeconfig: Path,
    namespace: str,
    tmp_path: Path,
    env: dict[str, str] | None = None,
) -> list[Effect]:
    """Start three replicas (`argv` + namespace, identity, effects file), wait until all say
    they are ready and TICKS ticks after that have an effect, stop them; the effects."""
    effects = tmp_path / "effects.txt"
    ready: set[str] = set()
    lock = threading.Lock()

    def on_line(data: dict[str, Any], _received: float, identity: str) -> None:
        if data.get("event") == "ready":
            with lock:
                ready.add(identity)

    children = [
        ChildProcess(
            name=identity,
            argv=[*argv, namespace, identity, str(effects)],
            log_path=tmp_path / f"{identity}.log",
            env={"KUBECONFIG": str(kubeconfig), **(env or {})},
            stdin=True,
            on_line=lambda data, received, identity=identity: on_line(data, received, identity),
        )
        for identity in IDENTITIES
    ]
    try:

        def all_ready() -> bool:
            for child in children:
                assert child.alive(), f"{child.name} exited:\n{child.log_tail()}"
            with lock:
                return len(ready) == len(IDENTITIES)

        poll(all_ready, timeout=120, what="three replicas ready")
        since = datetime.now(UTC).replace(microsecond=0)

        def ticks_after_ready() -> int:
            return len({e.tick for e in read_effects(effects) if e.tick > since})

        poll(lambda: ticks_after_ready() >= TICKS, timeout=60, what=f"{TICKS} ticks run")
    finally:
        stop_children(children, grace=5)
    return read_effects(effects)


def assert_once_per_tick(effects: list[Effect]) -> None:
    counts = Counter(e.tick for e in effects)
    twice = {tick.isoformat(): n for tick, n in counts.items() if n > 1}
    assert not twice, f"ticks run more than once: {twice}\n{effects}"
    tokens = [int(e.token) for e in sorted(effects, key=lambda e: e.tick)]
    assert tokens == sorted(set(tokens)), f"tokens do not increase with the ticks: {effects}"
    assert len(counts) >= TICKS


ThreeReplicas = Callable[..., list[Effect]]


@pytest.fixture
def three_replicas(kubeconfig: Path, namespace: str, tmp_path: Path) -> ThreeReplicas:
    """`three_replicas(argv, env=...)`: `run_replicas` in this test's namespace."""
    return functools.partial(
        run_replicas, kubeconfig=kubeconfig, namespace=namespace, tmp_path=tmp_path
    )


def test_apscheduler3_interval_job_runs_once_per_tick_across_three_replicas(
    three_replicas: ThreeReplicas,
) -> None:
    assert_once_per_tick(three_replicas([sys.executable, str(REPLICAS / "aps3_replica.py")]))


def _side_environment_python(venv: Path) -> Path:
    """The python of `venv` with APScheduler 4 and this checkout of leasecron (editable),
    built with uv when missing (under a lock: other test sessions may build it too), and
    installed again when it points at another checkout or pyproject.toml has changed."""
    python = venv / "bin" / "python"
    found = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if found is None:
        pytest.fail("uv is needed to build the APScheduler 4 side environment", pytrace=False)
    uv = [found]
    venv.parent.mkdir(parents=True, exist_ok=True)
    with (venv.parent / f".{venv.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        ready = venv / ".leasecron-complete"
        stamp = hashlib.sha256((REPOSITORY / "pyproject.toml").read_bytes()).hexdigest()
        if ready.exists() and ready.read_text() == stamp and python.exists():
            where = subprocess.run(
                [str(python), "-c", "import leasecron; print(leasecron.__file__)"],
                capture_output=True,
                text=True,
            )
            if where.returncode == 0 and where.stdout.strip().startswith(str(REPOSITORY)):
                return python
        steps = [
            [*uv, "venv", "-q", "--allow-existing", "--python", sys.executable, str(venv)],
            [
                *uv,
                "pip",
                "install",
                "-q",
                "--python",
                str(python),
                f"apscheduler=={APSCHEDULER4}",
                "-e",
                str(REPOSITORY),
            ],
        ]
        for step in steps:
            try:
                done = subprocess.run(step, capture_output=True, text=True, timeout=600)
            except subprocess.TimeoutExpired as e:
                done = subprocess.CompletedProcess(step, -1, "", f"timed out after {e.timeout}s")
            if done.returncode != 0:
                pytest.fail(
                    f"could not build the APScheduler {APSCHEDULER4} side environment in "
                    f"{venv} (is PyPI reachable?): {' '.join(step)}\n{done.stderr[-2000:]}",
                    pytrace=False,
                )
        ready.write_text(stamp)
    return python


@pytest.fixture(scope="session")
def apscheduler4_python() -> Path:
    """The python of a virtual environment with APScheduler 4 (cached outside the repository,
    in ~/.cache/leasecron/venvs)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return _side_environment_python(cache / "leasecron" / "venvs" / f"apscheduler4-{APSCHEDULER4}")


def test_apscheduler4_interval_schedule_runs_once_per_tick_across_three_replicas(
    apscheduler4_python: Path, three_replicas: ThreeReplicas
) -> None:
    assert_once_per_tick(
        three_replicas([str(apscheduler4_python), str(REPLICAS / "aps4_replica.py")])
    )


def test_celery_beat_on_every_replica_runs_the_task_once_per_tick(
    three_replicas: ThreeReplicas,
) -> None:
    assert_once_per_tick(three_replicas([sys.executable, str(REPLICAS / "celery_replica.py")]))


@pytest.mark.parametrize("loop", ["schedule", "plain"])
def test_a_schedule_library_or_plain_loop_runs_once_per_tick_across_three_replicas(
    loop: str, three_replicas: ThreeReplicas
) -> None:
    argv = [sys.executable, str(REPLICAS / "schedule_replica.py")]
    assert_once_per_tick(three_replicas(argv, env={"LEASECRON_TEST_LOOP": loop}))


@pytest.fixture
def release_guards() -> Iterator[None]:
    """The guards this process made stop their Lease caches after the test."""
    yield
    close_guards()


def _run_date_job(
    kube: Kube, namespace: str, *, late_by: float, grace: int, decorated: bool
) -> tuple[datetime, Any]:
    """An APScheduler 3.x job due `late_by` seconds ago with `misfire_grace_time=grace`, run
    by a guarded scheduler in this process; its scheduled run time and the job's event."""
    events: queue.Queue[Any] = queue.Queue()
    due = datetime.now(UTC) - timedelta(seconds=late_by)
    options: dict[str, Any] = {"namespace": namespace, "kube": kube, "stagger": 0}

    def report() -> datetime:
        return current_run().tick

    func = guard_job(at_most_for="1m")(report) if decorated else report
    scheduler = BackgroundScheduler(timezone="UTC")
    guarded(scheduler, **options)
    scheduler.add_listener(events.put, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR | EVENT_JOB_MISSED)
    scheduler.add_job(func, "date", run_date=due, id="late-report", misfire_grace_time=grace)
    scheduler.start()
    try:
        return due, events.get(timeout=30)
    finally:
        scheduler.shutdown(wait=True)


@pytest.mark.parametrize("decorated", [False, True], ids=["guarded", "guard_job"])
def test_a_late_apscheduler3_run_claims_the_tick_it_was_scheduled_for(
    decorated: bool, kube: Kube, namespace: str, release_guards: None
) -> None:
    due, event = _run_date_job(kube, namespace, late_by=5, grace=60, decorated=decorated)
    assert event.code == EVENT_JOB_EXECUTED, event
    assert event.retval.ran, event.retval
    assert event.retval.value == event.retval.tick == due.replace(microsecond=0)


def test_an_apscheduler3_run_past_its_misfire_grace_is_skipped_with_reason_deadline(
    kube: Kube, namespace: str, release_guards: None
) -> None:
    _, event = _run_date_job(kube, namespace, late_by=10, grace=2, decorated=False)
    assert event.code == EVENT_JOB_EXECUTED, event
    assert not event.retval.ran
    assert event.retval.reason == "deadline"


PHASES = (1.2, 1.5, 1.8)
"""Seconds past a 2 s grid point each replica's interval trigger starts: each beyond the
default misfire grace (1 s) of the tick its fire times snap to."""


def test_apscheduler3_interval_triggers_at_other_phases_than_the_grid_run_each_grid_tick_once(
    kube_api: ApiClient, namespace: str, leasecron_crds: list[str], release_guards: None
) -> None:
    now = datetime.now(UTC)
    grid = now.replace(microsecond=0) - timedelta(seconds=now.second % 2) + timedelta(seconds=4)
    calls: list[tuple[str, Any]] = []
    seen = threading.Condition()
    schedulers = []
    for index, phase in enumerate(PHASES):
        identity = f"aps-{index}"

        def report() -> datetime:
            return current_run().tick

        def on_event(event: Any, identity: str = identity) -> None:
            with seen:
                calls.append(
                    (identity, event.retval if event.code == EVENT_JOB_EXECUTED else event)
                )
                seen.notify_all()

        scheduler = BackgroundScheduler(timezone="UTC")
        kube = Kube(kube_api, max_workers=4)
        guarded(scheduler, namespace=namespace, kube=kube, identity=identity)
        scheduler.add_listener(on_event, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        start = grid + timedelta(seconds=phase)
        scheduler.add_job(report, "interval", seconds=2, start_date=start, id="report")
        schedulers.append(scheduler)
    for scheduler in schedulers:
        scheduler.start()

    def ticks_run() -> set[datetime]:
        return {result.tick for _, result in calls if getattr(result, "ran", False)}

    try:
        with seen:
            assert seen.wait_for(lambda: len(ticks_run()) >= 3, timeout=20), calls
    finally:
        for scheduler in schedulers:
            scheduler.shutdown(wait=True)
    by_tick: dict[datetime, list[Any]] = {}
    for _, result in calls:
        assert getattr(result, "tick", None) is not None, calls  # no job error
        by_tick.setdefault(result.tick, []).append(result)
    ran_ticks = sorted(ticks_run())
    gaps = [b - a for a, b in itertools.pairwise(ran_ticks)]
    assert set(gaps) == {timedelta(seconds=2)}, ran_ticks  # every grid tick in between ran
    complete = [t for t, results in by_tick.items() if len(results) == len(PHASES)]
    assert len(complete) >= 2, by_tick
    for tick in complete:
        assert tick.second % 2 == 0, tick
        ran = [r for r in by_tick[tick] if r.ran]
        assert len(ran) == 1 and ran[0].value == tick, by_tick[tick]
        assert {r.reason for r in by_tick[tick] if not r.ran} <= {"taken", "live_grant"}, by_tick


def test_run_every_loops_on_two_replicas_claim_each_tick_they_wake_for_once(
    kube: Kube, namespace: str, release_guards: None
) -> None:
    runs: list[tuple[datetime, str, int | None]] = []
    lock = threading.Condition()
    stop = threading.Event()

    def loop(identity: str) -> None:
        def refresh() -> None:
            run = current_run()
            with lock:
                runs.append((run.tick, identity, run.token))
                lock.notify_all()

        refresh.__name__ = "refresh_index"
        run_every(refresh, every="1s", stop=stop, namespace=namespace, kube=kube, identity=identity)

    threads = [threading.Thread(target=loop, args=(name,)) for name in ("loop-a", "loop-b")]
    for thread in threads:
        thread.start()
    try:
        with lock:
            assert lock.wait_for(lambda: len({tick for tick, _, _ in runs}) >= 3, timeout=30)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    ticks = [tick for tick, _, _ in runs]
    assert len(ticks) == len(set(ticks)), runs
    assert all(tick.microsecond == 0 and tick.tzinfo is not None for tick in ticks)
    tokens = [token for _, _, token in sorted(runs)]
    assert tokens == sorted(set(tokens)), runs


def test_an_async_job_of_an_asyncio_scheduler_claims_its_run_time_on_the_running_loop(
    kube: Kube, namespace: str
) -> None:
    async def scenario() -> Any:
        events: asyncio.Queue[Any] = asyncio.Queue()
        due = datetime.now(UTC) - timedelta(seconds=3)

        async def report() -> datetime:
            await asyncio.sleep(0)
            return current_run().tick

        scheduler = AsyncIOScheduler(timezone="UTC")
        guarded(scheduler, namespace=namespace, kube=kube, stagger=0)
        scheduler.add_listener(events.put_nowait, EVENT_JOB_EXECUTED | EVENT_JOB_ERROR)
        scheduler.add_job(report, "date", run_date=due, id="async-report", misfire_grace_time=60)
        scheduler.start()
        try:
            return due, await asyncio.wait_for(events.get(), timeout=30)
        finally:
            scheduler.shutdown(wait=False)
            await aclose_guards()

    due, event = asyncio.run(scenario())
    assert event.code == EVENT_JOB_EXECUTED, event
    assert event.retval.ran
    assert event.retval.value == due.replace(microsecond=0)
