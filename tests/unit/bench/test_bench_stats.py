"""The arithmetic behind the benchmark figures: percentiles, tick accounting, tables."""

from __future__ import annotations

import math

import pytest

from leasecron.bench._stats import (
    account_ticks,
    merge_counts,
    percentile,
    rounded,
    show,
    table,
)


def test_the_median_of_an_odd_count_is_the_middle_value() -> None:
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_percentiles_interpolate_between_neighbours() -> None:
    assert percentile([0.0, 10.0], 0.25) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.99) == pytest.approx(3.97)


def test_the_extreme_percentiles_are_the_minimum_and_maximum() -> None:
    values = [5.0, 1.0, 9.0]

    assert (percentile(values, 0.0), percentile(values, 1.0)) == (1.0, 9.0)


def test_the_percentile_of_nothing_is_nan_and_rounds_to_none() -> None:
    assert math.isnan(percentile([], 0.5))
    assert rounded(percentile([], 0.5)) is None


def test_a_fraction_outside_zero_to_one_is_refused() -> None:
    with pytest.raises(ValueError, match="fraction"):
        percentile([1.0], 50)


def test_every_tick_granted_once_has_no_duplicates_and_none_missed() -> None:
    grants = [(job, tick) for job in range(2) for tick in range(3)]

    account = account_ticks(grants, jobs=2, ticks=3)

    assert (account.expected, account.runs, account.duplicates, account.missed) == (6, 6, 0, 0)


def test_a_tick_granted_twice_is_one_duplicate_and_an_absent_tick_is_missed() -> None:
    grants = [(0, 0), (0, 0), (0, 0), (0, 2)]

    account = account_ticks(grants, jobs=1, ticks=3)

    assert (account.runs, account.duplicates, account.missed) == (4, 1, 1)


def test_a_grant_outside_the_plan_is_an_error_not_a_run() -> None:
    with pytest.raises(ValueError, match="outside"):
        account_ticks([(0, 3)], jobs=1, ticks=3)


def test_a_table_aligns_its_columns_under_a_title() -> None:
    text = table([("p50", "0.05 s", "<= 0.3 s"), ("maximum", "1 s", "-")], title="handover")

    lines = text.splitlines()
    assert lines[0] == "handover"
    assert lines[1].index("measured") == lines[3].index("0.05 s") == lines[4].index("1 s")
    assert all(line == line.rstrip() for line in lines)


def test_figures_show_three_decimals_units_and_na() -> None:
    assert (show(0.12345, " s"), show(3), show(None)) == ("0.123 s", "3", "n/a")


def test_skip_counts_of_several_replicas_add_up_by_reason() -> None:
    merged = merge_counts([{"taken": 3, "conflict": 1}, {"taken": 2.0}])

    assert merged == {"conflict": 1.0, "taken": 5.0}
