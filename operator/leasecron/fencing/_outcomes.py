"""What the helpers hand back, and the counters of what the stores refused.

A second claim of a period and a refused write are values, never exceptions (ShedLock's
`lock() -> Lock | None`): `Claim` and `Fenced` are falsy then, and each refusal is counted
in `leasecron_fenced_writes_refused_total` (a fenced write or fence a store turned down) or
`leasecron_period_claims_refused_total` (a period already claimed) before the value is
returned, so a refusal is never silent. The labels follow `leasecron._metrics`: `store`
(postgresql, sqlite, redis), `job_namespace`, `scheduled_job`, and for writes `check`
(upsert, fence).

Does not promise that the caller looks at the value: a handler that ignores a refused fence
and writes anyway writes without protection.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from prometheus_client import Counter

from leasecron._metrics import JOB_LABELS
from leasecron.fencing._runs import RunRef

WRITES_REFUSED = Counter(
    "leasecron_fenced_writes_refused_total",
    "Fenced writes and fences a store refused because it had seen a higher fencing token "
    "(a stale holder's write that did not land), by store and check (upsert, fence).",
    ["store", *JOB_LABELS, "check"],
)
CLAIMS_REFUSED = Counter(
    "leasecron_period_claims_refused_total",
    "Period claims a store refused because the period's run record existed already (a "
    "second run of the same period that must not repeat its effects), by store.",
    ["store", *JOB_LABELS],
)


class Check(StrEnum):
    """Which check refused a write."""

    UPSERT = "upsert"
    FENCE = "fence"


@dataclass(frozen=True)
class Claim:
    """The outcome of a period claim: truthy when this run recorded the period. When it
    did not, `token` is the token stored with the existing record (None when that run had
    none, or the store does not keep it)."""

    claimed: bool
    period: str
    token: int | None

    def __bool__(self) -> bool:
        return self.claimed


@dataclass(frozen=True)
class Fenced:
    """The outcome of a fenced write or fence: truthy when it applied. `token` is the run's
    token; `stored_token` the highest one the store had seen (the run's own when applied; a
    higher one when refused, None when the store no longer showed one)."""

    applied: bool
    token: int
    stored_token: int | None
    check: Check

    def __bool__(self) -> bool:
        return self.applied


def claim_outcome(
    store: str, run: RunRef, *, recorded: bool, existing: Callable[[], int | None]
) -> Claim:
    """`run`'s claim of its period: claimed when the store wrote its record (`recorded`);
    else refused and counted, with the token of the record already there (`existing`, read
    only then)."""
    if recorded:
        return Claim(claimed=True, period=run.period, token=run.token)
    token = existing()
    CLAIMS_REFUSED.labels(store, run.namespace, run.job).inc()
    return Claim(claimed=False, period=run.period, token=token)


def write_outcome(
    store: str, run: RunRef, check: Check, *, written: bool, stored: Callable[[], int | None]
) -> Fenced:
    """`run`'s fenced write or fence: applied when the store wrote it (`written`); else
    refused and counted, with the token the store holds (`stored`, read only then)."""
    token = run.fenced(check.value)
    if written:
        return Fenced(applied=True, token=token, stored_token=token, check=check)
    stored_token = stored()
    WRITES_REFUSED.labels(store, run.namespace, run.job, check.value).inc()
    return Fenced(applied=False, token=token, stored_token=stored_token, check=check)
