"""`run_demo`: the whole demo, start to summary.

1. Start a local control plane (or use the given kubeconfig), create a namespace, apply the
   CRDs and the three ScheduledJobs.
2. Create the shared ledger and start N replicas of the example app; wait until each says
   it is ready. The figures' window starts there.
3. Every send-invoices tick, half an interval after it (when its run has been reported),
   print who ran what, the tokens and the Lease holders.
4. Half way through, SIGKILL the queue-poller's owner (between two invoice ticks, so no
   once-per-tick grant dies with it), start a replacement as a Deployment would, and time
   the takeover on the successor's own report of its term's start.
5. After `seconds`, SIGTERM every replica, wait for them, read the ledger and the JobRuns,
   and return the Summary.

Whatever happens (Ctrl-C included) the replicas are stopped and the control plane with them.
Timing figures are the demo's observation on one shared machine, not a benchmark.
"""

from __future__ import annotations

import queue
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from leasecron.demo._jobs import (
    GROUP,
    ONCE_PER_TICK_JOB,
    SINGLE_OWNER_JOB,
    lease_duration,
    schedule_of,
    tick_interval,
)
from leasecron.demo._ledger import Ledger
from leasecron.demo._live import LiveState
from leasecron.demo._replicas import Replica, Replicas
from leasecron.demo._setup import Cluster, Reader, cluster, delete_namespace, prepare
from leasecron.demo._summary import Failover, Summary, Window, summarize
from leasecron.demo._view import (
    TickLine,
    format_header,
    format_kill,
    format_takeover,
    format_tick_line,
)
from leasecron.models.names import format_tick

Say = Callable[[str], None]
MIN_SECONDS = 10.0
_WINDOW_END_MARGIN = 0.5  # a tick is only expected when it had this long before the stop


class DemoError(RuntimeError):
    """The demo could not run (a replica died on start, a timeout)."""


@dataclass(frozen=True, kw_only=True)
class DemoOptions:
    """What `leasecron demo` was asked for."""

    seconds: float = 60.0
    replicas: int = 3
    kubeconfig: Path | None = None
    group: str = GROUP
    ready_timeout: float = 120.0
    grace_seconds: float = 20.0
    ledger_url: str | None = None
    """The example app's database (`postgresql+psycopg://...`); None: a SQLite file in the
    demo's work directory. The demo empties its own tables there first."""

    def __post_init__(self) -> None:
        if self.seconds < MIN_SECONDS:
            raise ValueError(f"seconds must be at least {MIN_SECONDS:g}, got {self.seconds:g}")
        if self.replicas < 2:
            raise ValueError(f"replicas must be at least 2 (one to kill), got {self.replicas}")


def run_demo(options: DemoOptions, *, say: Say) -> Summary:
    """Run the demo (see the module docstring) and return its figures."""
    with (
        tempfile.TemporaryDirectory(prefix="leasecron-demo-") as workdir,
        cluster(kubeconfig=options.kubeconfig, say=say) as where,
    ):
        namespace = prepare(kubeconfig=where.kubeconfig, group=options.group, say=say)
        try:
            return _Demo(
                options=options, say=say, where=where, namespace=namespace, workdir=Path(workdir)
            ).run()
        finally:
            if not where.local:
                delete_namespace(kubeconfig=where.kubeconfig, namespace=namespace)


@dataclass(kw_only=True)
class _Kill:
    victim: Replica
    token: int | None
    at: float
    successor: str | None = None
    seconds: float | None = None


@dataclass(kw_only=True)
class _Demo:
    options: DemoOptions
    say: Say
    where: Cluster
    namespace: str
    workdir: Path
    state: LiveState = field(default_factory=LiveState)

    def __post_init__(self) -> None:
        location = self.options.ledger_url or self.workdir / "ledger.sqlite"
        self.ledger = Ledger(location).create(fresh=True)
        self.replicas = Replicas(
            group=self.options.group,
            namespace=self.namespace,
            ledger=self.ledger.location,
            kubeconfig=self.where.kubeconfig,
            workdir=self.workdir,
        )
        self.reader = Reader(kubeconfig=self.where.kubeconfig, namespace=self.namespace)
        self.kill: _Kill | None = None
        self._reported_dead: set[str] = set()
        self._stopping = False

    def run(self) -> Summary:
        try:
            self.say(f"[demo] starting {self.options.replicas} replicas of the example app")
            for _ in range(self.options.replicas):
                self.replicas.start()
            ready_at = self._wait_ready()
            self.say(
                format_header(
                    replicas=[identity for _, identity in sorted(self.state.ready.items())],
                    namespace=self.namespace,
                    server=self.where.server,
                )
            )
            self._live(ready_at=ready_at)
            stop_at = time.time()
            self._stopping = True
            self.say("[demo] stopping the replicas (SIGTERM: owners hand over and exit)")
            self.replicas.stop_all(grace_seconds=self.options.grace_seconds)
            self.say(f"[demo] replicas stopped in {time.time() - stop_at:.1f}s")
            self.replicas.wait_readers(timeout=5.0)
            self._pump(until=time.time())
            window = Window(start=ready_at, end=stop_at - _WINDOW_END_MARGIN)
            return self._summary(window)
        finally:
            self.replicas.stop_all(grace_seconds=self.options.grace_seconds)
            self.reader.close()

    # -- phases ---------------------------------------------------------------------------

    def _wait_ready(self) -> float:
        began = time.monotonic()
        while len(self.state.ready) < self.options.replicas:
            if time.monotonic() - began > self.options.ready_timeout:
                waiting = [r for r in self.replicas.all if r.pod not in self.state.ready]
                tails = "\n".join(f"{r.pod}:\n{r.log_tail(lines=10)}" for r in waiting)
                raise DemoError(
                    f"only {len(self.state.ready)} of {self.options.replicas} replicas ready "
                    f"after {self.options.ready_timeout:g}s; their logs end with:\n{tails}"
                )
            for replica in self.replicas.all:
                if not replica.alive():
                    raise DemoError(
                        f"{replica.pod} exited with code {replica.returncode} before it "
                        f"was ready:\n{replica.log_tail(lines=10)}"
                    )
            self._pump(until=time.time() + 0.2)
        names = ", ".join(
            f"{pod} as {identity}" for pod, identity in sorted(self.state.ready.items())
        )
        self.say(f"[demo] ready in {time.monotonic() - began:.1f}s: {names}")
        return time.time()

    def _live(self, *, ready_at: float) -> None:
        interval = tick_interval(ONCE_PER_TICK_JOB)
        schedule = schedule_of(ONCE_PER_TICK_JOB)
        deadline = ready_at + self.options.seconds
        tick = schedule.next_after(datetime.fromtimestamp(ready_at, UTC))
        self.state.take_cache_runs()  # runs from before everyone was ready are not shown
        while (show_at := tick.timestamp() + interval / 2) <= deadline:
            self._pump(until=show_at)
            self._show(tick=tick, elapsed=show_at - ready_at)
            self._check_takeover()
            if self.kill is None and show_at - ready_at >= self.options.seconds / 2:
                self._kill_owner()
            tick = schedule.next_after(tick)
        self._pump(until=deadline)
        self._check_takeover()

    def _show(self, *, tick: datetime, elapsed: float) -> None:
        line = TickLine(
            elapsed=elapsed,
            tick=tick,
            invoices=self.state.invoices.get(format_tick(tick), []),
            cache=self.state.take_cache_runs(),
            poller=self.state.poller_run(),
            leases=self.reader.leases(jobs=(ONCE_PER_TICK_JOB, SINGLE_OWNER_JOB)),
        )
        self.say(format_tick_line(line))

    def _kill_owner(self) -> None:
        """SIGKILL the queue-poller's Lease holder and start its replacement."""
        holder = self.reader.leases(jobs=(SINGLE_OWNER_JOB,)).get(SINGLE_OWNER_JOB)
        term = self.state.current_term()
        identity = holder.holder if holder is not None and holder.holder else ""
        identity = identity or (term.replica if term is not None else "")
        victim = self.replicas.by_identity(identity)
        if victim is None or not victim.alive():
            self.say("[demo] queue-poller has no live owner yet: nothing to kill this tick")
            return
        token = term.token if term is not None and term.replica == identity else None
        if token is None and holder is not None:
            token = holder.transitions
        pid = victim.pid
        self.kill = _Kill(victim=victim, token=token, at=self.replicas.kill(victim))
        self.state.mark_dead(identity)
        self.say(format_kill(victim=identity, token=token, pid=pid))
        replacement = self.replicas.start()
        self.say(f"[demo] started {replacement.pod} to replace it, as its Deployment would")

    def _check_takeover(self) -> None:
        kill = self.kill
        if kill is None or kill.successor is not None:
            return
        successor = self.state.successor_of(replica=kill.victim.identity, token=kill.token)
        if successor is None:
            return
        kill.successor = successor.replica
        kill.seconds = max(0.0, successor.ts - kill.at)
        self.say(
            format_takeover(
                successor=successor.replica,
                token=successor.token,
                seconds=kill.seconds,
                bound=lease_duration().total_seconds(),
            )
        )

    # -- events ---------------------------------------------------------------------------

    def _pump(self, *, until: float) -> None:
        """Apply replica events as they arrive until the wall clock reaches `until`."""
        while True:
            remaining = until - time.time()
            try:
                event = self.replicas.events.get(timeout=max(0.0, min(remaining, 0.5)))
            except queue.Empty:
                self._note_deaths()
                if remaining <= 0:
                    return
                continue
            self.state.apply(event)
            replica = self.replicas.by_pod(event.pod)
            if event.kind == "ready" and replica is not None:
                replica.identity = event.replica

    def _note_deaths(self) -> None:
        if self._stopping:
            return
        for replica in self.replicas.all:
            killed = self.kill is not None and self.kill.victim is replica
            if replica.alive() or killed or replica.pod in self._reported_dead:
                continue
            self._reported_dead.add(replica.pod)
            self.say(
                f"[demo] {replica.pod} exited unexpectedly (code {replica.returncode}):"
                f"\n{replica.log_tail(lines=10)}"
            )

    def _summary(self, window: Window) -> Summary:
        invoice_ticks = set(window.ticks(ONCE_PER_TICK_JOB))
        kill = self.kill
        return summarize(
            replicas=self.options.replicas,
            window=window,
            attempts=self.ledger.attempts(job=ONCE_PER_TICK_JOB),
            refresh_runs=self.state.refresh_runs,
            terms=self.ledger.terms(job=SINGLE_OWNER_JOB),
            invoices=self.ledger.invoice_count(),
            mails=self.ledger.queue_counts(),
            jobruns=self.reader.jobruns(ticks=invoice_ticks),
            failover=Failover(
                killed=None if kill is None else kill.victim.identity,
                took_over=None if kill is None else kill.successor,
                takeover_s=None if kill is None else kill.seconds,
            ),
        )
