"""The run a fenced write speaks for: `RunLike` (what the helpers read from a `JobContext`, a
guard's `current_run()` or any object with those attributes) and `RunRef`, the checked value
they work with.

Owns the validation of a run's fields, with errors that name the field and its value. Does
not promise anything about the run being current: that is what the store's check is for.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from leasecron.models.names import format_tick

MAX_TOKEN = 2**63 - 1
"""The largest token a BIGINT column keeps."""


class FencingError(ValueError):
    """Input a fencing helper cannot use: a run without a token, a token that is not an
    integer, a table without the token column, a Redis key holding another type. The message
    names the field and the value."""


class RunLike(Protocol):
    """What the helpers read from a run: `leasecron.JobContext` and `leasecron.GuardRun` (the
    `current_run()` of a guarded body) both fit, and so does any object with these
    attributes. A guard's run without a ScheduledJob has `job` None; its `guard` name stands
    in then."""

    @property
    def namespace(self) -> str: ...

    @property
    def job(self) -> str | None: ...

    @property
    def tick(self) -> datetime: ...

    @property
    def token(self) -> int | None: ...


@dataclass(frozen=True)
class RunRef:
    """A run as the stores see it: the job (`namespace`, `job`), the period it works for
    (the tick as RFC 3339 UTC unless given) and its fencing token (None for runs that have
    none: every-replica and unguarded runs; only a period claim accepts those)."""

    namespace: str
    job: str
    period: str
    token: int | None
    holder: str | None = None

    def fenced(self, what: str) -> int:
        """The token, or FencingError naming `what` needs it."""
        if self.token is None:
            raise FencingError(
                f"{what}: the run of {self.namespace}/{self.job} for {self.period} has no "
                "fencing token (token=None): every-replica and unguarded runs have none. Run "
                "the job once-per-tick or single-owner, or use claim_period, which needs none"
            )
        return self.token


def run_ref(run: RunLike, *, period: str | None = None) -> RunRef:
    """Check `run` and return its `RunRef`; FencingError names the first bad field."""
    namespace = _text(run, "namespace")
    job = getattr(run, "job", None) or getattr(run, "guard", None)
    if not isinstance(job, str) or not job:
        raise FencingError(f"run.job must be a non-empty string, got {job!r}")
    token = check_token(getattr(run, "token", None))
    if period is None:
        period = _period(getattr(run, "tick", None))
    elif not isinstance(period, str) or not period:
        raise FencingError(f"period must be a non-empty string, got {period!r}")
    holder = getattr(run, "holder", None)
    return RunRef(
        namespace=namespace,
        job=job,
        period=period,
        token=token,
        holder=holder if isinstance(holder, str) and holder else None,
    )


def check_token(token: object) -> int | None:
    """`token` if it is None or an integer a BIGINT keeps, else FencingError."""
    if token is None:
        return None
    if isinstance(token, bool) or not isinstance(token, int):
        raise FencingError(f"run.token must be an integer, got {token!r} ({type(token).__name__})")
    if not 0 <= token <= MAX_TOKEN:
        raise FencingError(f"run.token must be between 0 and {MAX_TOKEN}, got {token}")
    return token


def _text(run: object, field: str) -> str:
    value = getattr(run, field, None)
    if not isinstance(value, str) or not value:
        raise FencingError(f"run.{field} must be a non-empty string, got {value!r}")
    return value


def _period(tick: object) -> str:
    if not isinstance(tick, datetime):
        raise FencingError(f"run.tick must be a datetime, got {tick!r}")
    if tick.tzinfo is None:
        raise FencingError(f"run.tick must be timezone-aware, got {tick.isoformat()}")
    return format_tick(tick)
