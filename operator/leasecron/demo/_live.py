"""What the driver knows while the demo runs, folded from the replicas' events: who is ready,
who ran each send-invoices tick, who refreshed its cache, and the queue poller's ownership
terms (so the failover can be timed from the successor's own clock reading).

Owns that bookkeeping only: no I/O, no printing. Events may arrive late or out of order
between replicas; nothing here depends on their order except "the newest term by token".
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from leasecron.demo._jobs import EVERY_REPLICA_JOB, ONCE_PER_TICK_JOB, SINGLE_OWNER_JOB
from leasecron.demo._replicas import Event
from leasecron.demo._view import Run

TERM_STARTED = "term-started"
TERM_ENDED = "term-ended"


@dataclass(frozen=True, kw_only=True)
class TermStart:
    """A single-owner ownership term as its owner reported it."""

    replica: str
    token: int | None
    ts: float


class LiveState:
    """The demo's view of the replicas, fed one Event at a time."""

    def __init__(self) -> None:
        self.ready: dict[str, str] = {}
        """pod -> identity of every replica that reported ready."""
        self.stopped: set[str] = set()
        self.invoices: dict[str, list[Run]] = defaultdict(list)
        """send-invoices tick -> runs reported for it."""
        self.refresh_runs: list[tuple[str, str]] = []
        """(tick, replica) of every refresh-cache run reported."""
        self.terms: list[TermStart] = []
        self._ended: set[tuple[str, int | None]] = set()
        self._processed: dict[tuple[str, int | None], int] = {}
        self._cache_since_line: list[str] = []

    def apply(self, event: Event) -> None:
        if event.kind == "ready":
            self.ready[event.pod] = event.replica
        elif event.kind == "stopped":
            self.stopped.add(event.pod)
        elif event.kind == "run":
            self._apply_run(event)

    def _apply_run(self, event: Event) -> None:
        run = Run(replica=event.replica, token=event.token, outcome=event.outcome)
        if event.job == ONCE_PER_TICK_JOB:
            self.invoices[event.tick].append(run)
        elif event.job == EVERY_REPLICA_JOB:
            self.refresh_runs.append((event.tick, event.replica))
            self._cache_since_line.append(event.replica)
        elif event.job == SINGLE_OWNER_JOB:
            key = (event.replica, event.token)
            processed = event.extra.get("processed")
            if isinstance(processed, int):
                self._processed[key] = processed
            if event.outcome == TERM_STARTED:
                self.terms.append(TermStart(replica=event.replica, token=event.token, ts=event.ts))
            elif event.outcome == TERM_ENDED:
                self._ended.add(key)

    def mark_dead(self, replica: str) -> None:
        """`replica` was killed: its terms ended without a word."""
        self._ended.update((t.replica, t.token) for t in self.terms if t.replica == replica)

    def take_cache_runs(self) -> list[str]:
        """Replicas that refreshed since the last call."""
        taken, self._cache_since_line = self._cache_since_line, []
        return taken

    def current_term(self) -> TermStart | None:
        """The newest term (highest token) that has not reported its end."""
        live = [t for t in self.terms if (t.replica, t.token) not in self._ended]
        return max(live, key=lambda t: (t.token or -1, t.ts), default=None)

    def poller_run(self) -> Run | None:
        """The current term as a Run whose outcome says how many mails it has sent."""
        term = self.current_term()
        if term is None:
            return None
        processed = self._processed.get((term.replica, term.token), 0)
        return Run(replica=term.replica, token=term.token, outcome=f"{processed} mails")

    def successor_of(self, *, replica: str, token: int | None) -> TermStart | None:
        """The first term started by another replica with a higher token than the given one."""
        floor = -1 if token is None else token
        later = [t for t in self.terms if t.replica != replica and (t.token or -1) > floor]
        return min(later, key=lambda t: t.ts, default=None)
