"""The chart's Grafana dashboard queries only metrics the code exports: every series name in
its PromQL (panels and template variables) is one that leasecron._metrics or
leasecron.operator._metrics registers, with the suffixes Prometheus gives counters
(`_total`) and histograms (`_bucket`, `_sum`, `_count`); and it shows what an operator of the
product looks at first."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prometheus_client.metrics import MetricWrapperBase

from leasecron import _metrics as shared
from leasecron.operator import _metrics as operator_metrics

CHART = Path(__file__).resolve().parents[3] / "charts" / "leasecron"
DASHBOARD = CHART / "dashboards" / "leasecron.json"

SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
    "stateset": ("",),
}
_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGES = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_VARIABLES = re.compile(r"\$\{[^}]*\}|\$\w+")
_NAMES = re.compile(r"(?<![\w.:])[A-Za-z_:][\w:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"}
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*([A-Za-z_:][\w:]*)\s*[{,]")


def exported_series() -> set[str]:
    """Every series name the code's metrics can produce."""
    names: set[str] = set()
    for module in (shared, operator_metrics):
        for value in vars(module).values():
            if isinstance(
                value, (MetricWrapperBase, shared.CompactHistogram, shared.CompactCounter)
            ):
                for family in value.describe():
                    names.update(family.name + s for s in SUFFIXES[family.type])
    return names


def series_in(expr: str) -> set[str]:
    """The series names a PromQL expression selects (not its functions, aggregations,
    keywords, label names, label values, durations or Grafana variables)."""
    text = _STRINGS.sub(" ", expr)
    text = _VARIABLES.sub(" ", text)
    text = _MATCHERS.sub(" ", text)
    text = _RANGES.sub(" ", text)
    text = _GROUPING.sub(" ", text)
    found = set()
    for match in _NAMES.finditer(text):
        if text[match.end() :].lstrip().startswith("("):
            continue  # a function or an aggregation
        if match.group() not in _KEYWORDS:
            found.add(match.group())
    return found


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and template variable query."""

    def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for panel in items:
            yield panel
            yield from panels(panel.get("panels", []))

    for panel in panels(dashboard.get("panels", [])):
        for target in panel.get("targets", []):
            yield f"panel {panel['title']!r} {target['refId']}", target["expr"]
    for variable in dashboard.get("templating", {}).get("list", []):
        query = variable.get("query")
        text = query.get("query") if isinstance(query, dict) else query
        if variable.get("type") == "query" and isinstance(text, str):
            match = _LABEL_VALUES.match(text)
            yield f"variable {variable['name']!r}", match.group(1) if match else text


def unknown_series(dashboard: dict[str, Any]) -> dict[str, list[str]]:
    exported = exported_series()
    unknown = {where: sorted(series_in(expr) - exported) for where, expr in queries(dashboard)}
    return {where: names for where, names in unknown.items() if names}


def load() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return dashboard


def test_every_series_the_dashboard_queries_is_one_the_code_exports() -> None:
    assert unknown_series(load()) == {}


def test_every_query_of_the_dashboard_selects_at_least_one_series() -> None:
    empty = [where for where, expr in queries(load()) if not series_in(expr)]
    assert empty == []


def test_a_panel_that_queries_a_name_the_code_does_not_export_is_reported() -> None:
    dashboard = load()
    dashboard["panels"].append(
        {
            "title": "typos",
            "targets": [
                {"refId": "A", "expr": "sum(rate(leasecron_run_total[5m]))"},
                {"refId": "B", "expr": "rate(leasecron_run_duration_seconds_total[5m])"},
                {"refId": "C", "expr": "leasecron_record_backlog_count"},
            ],
        }
    )
    assert unknown_series(dashboard) == {
        "panel 'typos' A": ["leasecron_run_total"],
        "panel 'typos' B": ["leasecron_run_duration_seconds_total"],
        "panel 'typos' C": ["leasecron_record_backlog_count"],
    }


def test_functions_labels_values_durations_and_variables_are_not_taken_for_series() -> None:
    expr = (
        "histogram_quantile(0.99, sum by (le, bucket) (rate(leasecron_start_lag_seconds_bucket"
        '{job_namespace=~"$namespace", outcome!~"Succeeded|x"}[$__rate_interval] offset 1h)))'
        " / on (le) group_left (bucket) 1e3 > bool time() - leasecron_leader"
    )
    assert series_in(expr) == {"leasecron_start_lag_seconds_bucket", "leasecron_leader"}


def test_counters_and_histograms_are_queried_by_their_series_names_not_their_base_names() -> None:
    exported = exported_series()
    assert {"leasecron_runs_total", "leasecron_run_duration_seconds_bucket"} <= exported
    assert "leasecron_runs" not in exported and "leasecron_run_duration_seconds" not in exported


def test_the_dashboard_shows_runs_skips_missed_runs_timing_leadership_and_backlog() -> None:
    queried = set().union(*(series_in(expr) for _, expr in queries(load())))
    assert {
        "leasecron_runs_total",
        "leasecron_skips_total",
        "leasecron_missed_runs_total",
        "leasecron_run_duration_seconds_bucket",
        "leasecron_start_lag_seconds_bucket",
        "leasecron_leader",
        "leasecron_leadership_transitions_total",
        "leasecron_record_backlog",
        "leasecron_last_success_timestamp_seconds",
    } <= queried


def test_every_panel_reads_the_chosen_data_source_and_has_its_own_id() -> None:
    panels = [p for p in load()["panels"] if p["type"] != "row"]
    assert all(p["datasource"] == {"type": "prometheus", "uid": "${datasource}"} for p in panels)
    ids = [p["id"] for p in load()["panels"]]
    assert len(ids) == len(set(ids))
