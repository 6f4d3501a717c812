"""The demo's figures: what ran, how often, and how long the failover took, computed from the
shared ledger (the durable record of every send_invoices attempt and every ownership term),
the every-replica runs the replicas reported, and the JobRuns count the driver read.

The window is what the figures are judged over: ticks strictly after the moment every replica
was ready, and at or before the moment the driver began stopping them (less a margin, so a
tick is only expected when it had time to start). `duplicates` counts every tick run more than
once, inside the window or not. Does not read anything itself; the driver passes it in.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from leasecron.demo._jobs import EVERY_REPLICA_JOB, ONCE_PER_TICK_JOB, schedule_of
from leasecron.demo._ledger import Attempt, InvoiceOutcome, Term
from leasecron.models.names import format_tick

_LIMIT = 100_000


@dataclass(frozen=True, kw_only=True)
class Window:
    """The wall-clock span (Unix seconds) the figures are judged over."""

    start: float
    end: float

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    def ticks(self, job: str) -> list[str]:
        """The ticks of `job` in the window, formatted as the replicas report them."""
        schedule = schedule_of(job)
        start = datetime.fromtimestamp(self.start, UTC)
        end = datetime.fromtimestamp(self.end, UTC)
        return [format_tick(t) for t in schedule.ticks_between(start, end, limit=_LIMIT)]


@dataclass(frozen=True, kw_only=True)
class Failover:
    """The SIGKILL of the single-owner holder and who took over how fast."""

    killed: str | None = None
    took_over: str | None = None
    takeover_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class Summary:
    """The demo's closing figures; `as_json()` is what `--json` prints."""

    replicas: int
    window_s: float
    ticks: int
    every_replica_ticks: int
    runs_every_replica: int
    every_replica_repeats: int
    """(tick, replica) pairs run more than once: each replica runs each tick at most once."""
    runs_once_per_tick: int
    single_owner_terms: int
    term_tokens: tuple[int, ...]
    duplicates: int
    missed: int
    invoices: int
    stale_rejected: int
    mails_enqueued: int
    mails_processed: int
    jobruns: int
    jobruns_missed: int
    killed: str | None
    took_over: str | None
    takeover_s: float | None

    def as_json(self) -> dict[str, Any]:
        return {
            "replicas": self.replicas,
            "window_s": round(self.window_s, 3),
            "ticks": self.ticks,
            "every_replica_ticks": self.every_replica_ticks,
            "runs": {
                "every-replica": self.runs_every_replica,
                "once-per-tick": self.runs_once_per_tick,
                "single-owner-terms": self.single_owner_terms,
            },
            "every_replica_repeats": self.every_replica_repeats,
            "term_tokens": list(self.term_tokens),
            "duplicates": self.duplicates,
            "missed": self.missed,
            "invoices": self.invoices,
            "stale_rejected": self.stale_rejected,
            "mails": {"enqueued": self.mails_enqueued, "processed": self.mails_processed},
            "jobruns": self.jobruns,
            "jobruns_missed": self.jobruns_missed,
            "killed": self.killed,
            "took_over": self.took_over,
            "takeover_s": None if self.takeover_s is None else round(self.takeover_s, 3),
        }


def summarize(
    *,
    replicas: int,
    window: Window,
    attempts: Iterable[Attempt],
    refresh_runs: Iterable[tuple[str, str]],
    terms: Iterable[Term],
    invoices: int,
    mails: tuple[int, int],
    jobruns: tuple[int, int],
    failover: Failover,
) -> Summary:
    """The figures. `refresh_runs` holds (tick, replica) of every refresh-cache run reported;
    `jobruns` counts the send-invoices JobRuns with a tick in the window: (runs, Missed)."""
    attempts = list(attempts)
    refreshes = Counter(refresh_runs)
    per_tick = Counter(a.tick for a in attempts)
    invoice_ticks = window.ticks(ONCE_PER_TICK_JOB)
    cache_ticks = set(window.ticks(EVERY_REPLICA_JOB))
    term_tokens = tuple(sorted({t.token for t in terms}))
    return Summary(
        replicas=replicas,
        window_s=window.seconds,
        ticks=len(invoice_ticks),
        every_replica_ticks=len(cache_ticks),
        runs_every_replica=sum(n for (tick, _), n in refreshes.items() if tick in cache_ticks),
        every_replica_repeats=sum(1 for n in refreshes.values() if n > 1),
        runs_once_per_tick=sum(per_tick[tick] for tick in invoice_ticks),
        single_owner_terms=len(term_tokens),
        term_tokens=term_tokens,
        duplicates=sum(1 for count in per_tick.values() if count > 1),
        missed=sum(1 for tick in invoice_ticks if per_tick[tick] == 0),
        invoices=invoices,
        stale_rejected=sum(1 for a in attempts if a.outcome == InvoiceOutcome.STALE.value),
        mails_enqueued=mails[0],
        mails_processed=mails[1],
        jobruns=jobruns[0],
        jobruns_missed=jobruns[1],
        killed=failover.killed,
        took_over=failover.took_over,
        takeover_s=failover.takeover_s,
    )
