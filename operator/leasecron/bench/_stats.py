"""Pure arithmetic and formatting for the benchmarks: percentiles, tick accounting, tables.

No I/O and no clocks, so the figures the benchmarks print are unit-tested. It does not judge
the figures against targets beyond printing them side by side.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


def percentile(values: Sequence[float], fraction: float) -> float:
    """The `fraction` (0..1) percentile by linear interpolation; NaN for no values."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be within 0..1, got {fraction}")
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True, kw_only=True)
class TickAccount:
    """Who got which tick: `runs` grants in all, `duplicates` ticks granted more than once,
    `missed` ticks never granted, out of `expected` (jobs x ticks)."""

    expected: int
    runs: int
    duplicates: int
    missed: int


def account_ticks(grants: Iterable[tuple[int, int]], *, jobs: int, ticks: int) -> TickAccount:
    """Count `grants` ((job, tick) pairs, one per grant) against every job x tick expected."""
    per_tick = Counter(grants)
    unexpected = [key for key in per_tick if not (0 <= key[0] < jobs and 0 <= key[1] < ticks)]
    if unexpected:
        raise ValueError(f"grants outside {jobs} jobs x {ticks} ticks: {unexpected[:5]}")
    return TickAccount(
        expected=jobs * ticks,
        runs=sum(per_tick.values()),
        duplicates=sum(1 for n in per_tick.values() if n > 1),
        missed=jobs * ticks - len(per_tick),
    )


def rounded(value: float, digits: int = 3) -> float | None:
    """`value` rounded for JSON; None for NaN (JSON has no NaN)."""
    return None if math.isnan(value) else round(value, digits)


def table(rows: Sequence[tuple[str, str, str]], *, title: str) -> str:
    """A three-column text table (figure, measured, target) under `title`."""
    header = ("figure", "measured", "target (DESIGN.md section 8)")
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(3)]
    lines = [title, "  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )
    return "\n".join(lines)


def show(value: object, unit: str = "") -> str:
    """A figure for the table: floats with 3 significant decimals, None as "n/a"."""
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.3f}{unit}"
    return f"{value}{unit}"


def merge_counts(counts: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Sum of several {reason: count} mappings."""
    total: Counter[str] = Counter()
    for one in counts:
        total.update({k: float(v) for k, v in one.items()})
    return dict(sorted(total.items()))
