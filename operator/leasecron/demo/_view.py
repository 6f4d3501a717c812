"""What the demo prints: one plain line per once-per-tick tick (who ran what, which tokens, who
holds the Leases), the failover lines, and the closing summary as text.

Pure formatting: values in, strings out. Replica identities are shown by their readable part
(`replica-2`), which is unique within one demo run. Owns no terminal control (no curses, no
colours), so the output reads the same in a log file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from leasecron.demo._summary import Summary
from leasecron.models.identity import identity_base


@dataclass(frozen=True, kw_only=True)
class Run:
    """One handler run as reported on a replica's stdout."""

    replica: str
    token: int | None
    outcome: str


@dataclass(frozen=True, kw_only=True)
class LeaseView:
    """A Lease as the driver last read it: holder ("" when free) and leaseTransitions."""

    holder: str
    transitions: int


@dataclass(frozen=True, kw_only=True)
class TickLine:
    """Everything shown for one tick of the once-per-tick job."""

    elapsed: float
    tick: datetime
    invoices: Sequence[Run]
    cache: Sequence[str]
    """Replicas that refreshed their cache since the previous line."""
    poller: Run | None
    """The single-owner's current term (outcome: mails processed so far), None when ownerless."""
    leases: Mapping[str, LeaseView] = field(default_factory=dict)


def short(identity: str) -> str:
    """`replica-2` for `replica-2-1a2b3c4d`."""
    return identity_base(identity) if identity else "-"


def _token(token: int | None) -> str:
    return "#?" if token is None else f"#{token}"


def _runs(runs: Sequence[Run]) -> str:
    if not runs:
        return "(no run)"
    return ", ".join(f"{short(r.replica)} {_token(r.token)} {r.outcome}" for r in runs)


def _leases(leases: Mapping[str, LeaseView]) -> str:
    parts = [
        f"{name}={short(view.holder) if view.holder else 'free'}/{view.transitions}"
        for name, view in sorted(leases.items())
    ]
    return " ".join(parts) if parts else "-"


def format_tick_line(line: TickLine) -> str:
    """`+12.0s 10:31:06 | invoices: replica-2 #7 written | cache: replica-1 replica-3 | ...`"""
    cache = " ".join(sorted(short(r) for r in line.cache)) or "-"
    poller = (
        "no owner"
        if line.poller is None
        else f"{short(line.poller.replica)} {_token(line.poller.token)} ({line.poller.outcome})"
    )
    return (
        f"{line.elapsed:+6.1f}s {line.tick:%H:%M:%S} | invoices: {_runs(line.invoices)}"
        f" | cache: {cache} | poller: {poller} | leases: {_leases(line.leases)}"
    )


def format_header(*, replicas: Iterable[str], namespace: str, server: str) -> str:
    names = ", ".join(short(r) for r in replicas)
    return (
        f"[demo] {namespace} on {server}: replicas {names}. One line per send-invoices tick; "
        "#N is a fencing token, leases show holder/leaseTransitions."
    )


def format_kill(*, victim: str, token: int | None, pid: int) -> str:
    return (
        f"[demo] SIGKILL {short(victim)} (pid {pid}), the queue-poller owner {_token(token)}: "
        "no release, the standbys must wait for the Lease to expire"
    )


def format_takeover(*, successor: str, token: int | None, seconds: float, bound: float) -> str:
    return (
        f"[demo] {short(successor)} took over queue-poller {_token(token)} "
        f"{seconds:.2f}s after the kill (leaseDuration {bound:g}s)"
    )


def format_summary(summary: Summary) -> list[str]:
    """The closing summary as text lines."""
    takeover = "-" if summary.takeover_s is None else f"{summary.takeover_s:.2f}s"
    lines = [
        f"[demo] summary over {summary.window_s:.0f}s with {summary.replicas} replicas:",
        f"  send-invoices (once-per-tick): {summary.ticks} ticks, "
        f"{summary.runs_once_per_tick} runs, {summary.duplicates} duplicates, "
        f"{summary.missed} missed, {summary.invoices} invoices, "
        f"{summary.stale_rejected} stale writes rejected; "
        f"JobRuns: {summary.jobruns} runs, {summary.jobruns_missed} Missed",
        f"  refresh-cache (every-replica): {summary.every_replica_ticks} ticks, "
        f"{summary.runs_every_replica} runs "
        f"({summary.runs_every_replica / max(summary.every_replica_ticks, 1):.2f} per tick)",
        f"  queue-poller (single-owner): {summary.single_owner_terms} ownership terms "
        f"(tokens {', '.join(str(t) for t in summary.term_tokens) or '-'}), "
        f"{summary.mails_processed}/{summary.mails_enqueued} mails sent",
        f"  failover: {short(summary.killed or '')} killed, "
        f"{short(summary.took_over or '')} took over in {takeover}",
    ]
    return lines
