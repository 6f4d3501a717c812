"""`leasecron validate`: offline checks of manifest files, text and JSON output, exit codes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from leasecron.cli import main

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted((REPO / "examples" / "jobs").glob("*.yaml"))

GOOD = """\
apiVersion: leasecron.dev/v1alpha1
kind: ScheduledJob
metadata: {name: nightly-report, namespace: billing}
spec: {bucket: once-per-tick, schedule: "0 2 * * *", timeZone: Europe/Berlin}
"""
BAD = """\
apiVersion: leasecron.dev/v1alpha1
kind: ScheduledJob
metadata: {name: broken}
spec:
  bucket: once-per-tick
  schedule: "61 * * * *"
  lock: {atLeastFor: 20m}
"""
OTHER = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {a: b}
"""


def run(*args: str, stdin: str | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(main, ["validate", *args], input=stdin)
    return result.exit_code, result.output


Write = Callable[[str, str], str]


@pytest.fixture
def write(tmp_path: Path) -> Write:
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return str(path)

    return write


def test_a_valid_job_prints_ok_with_namespace_and_name_and_exits_zero(write: Write) -> None:
    path = write("good.yaml", GOOD)
    code, output = run(path)
    assert code == 0
    assert output == f"ok {path}: billing/nightly-report\n"


def test_each_problem_is_a_line_naming_file_kind_name_field_and_value(write: Write) -> None:
    path = write("bad.yaml", BAD)
    code, output = run(path)
    assert code == 1
    lines = output.splitlines()
    assert (
        f"{path}: ScheduledJob/broken: spec.schedule: '61 * * * *' has an invalid minute"
        in (lines[0])
    )
    assert lines[1] == (
        f"{path}: ScheduledJob/broken: spec.lock.atLeastFor: '20m' must not exceed "
        "spec.lock.atMostFor ('15m')"
    )
    assert len(lines) == 2


def test_every_document_of_a_multi_document_file_is_checked(write: Write) -> None:
    path = write("all.yaml", "---\n".join([GOOD, OTHER, BAD]))
    code, output = run(path)
    assert code == 1
    assert f"ok {path}: billing/nightly-report" in output
    assert f"skip {path}: ConfigMap/settings" in output
    assert "ScheduledJob/broken: spec.lock.atLeastFor" in output


def test_a_file_with_no_scheduledjob_fails_naming_what_it_holds(write: Write) -> None:
    path = write("cm.yaml", OTHER)
    code, output = run(path)
    assert code == 1
    assert f"skip {path}: ConfigMap/settings" in output
    assert f"{path}: no ScheduledJob in this file (found ConfigMap/settings)" in output


def test_stdin_is_read_for_a_dash() -> None:
    code, output = run("-", stdin=GOOD)
    assert code == 0
    assert output == "ok <stdin>: billing/nightly-report\n"


def test_a_file_that_is_not_yaml_fails(write: Write) -> None:
    path = write("junk.yaml", "spec: [unclosed\n")
    code, output = run(path)
    assert code == 1
    assert output.startswith(f"{path}: not YAML")


def test_a_missing_file_is_a_usage_error() -> None:
    code, output = run("/nonexistent/job.yaml")
    assert code == 2
    assert "/nonexistent/job.yaml" in output


def test_json_output_lists_verdicts_with_structured_problems(write: Write) -> None:
    path = write("all.yaml", "---\n".join([GOOD, BAD]))
    code, output = run("--output", "json", path)
    assert code == 1
    verdicts = json.loads(output)
    assert [v["verdict"] for v in verdicts] == ["ok", "invalid"]
    assert verdicts[0]["namespace"] == "billing"
    problem = verdicts[1]["problems"][1]
    assert problem["path"] == "spec.lock.atLeastFor"
    assert problem["value"] == "20m"
    assert problem["message"] == "must not exceed spec.lock.atMostFor ('15m')"


def test_a_missing_field_has_no_value_in_json(write: Write) -> None:
    text = GOOD.replace('schedule: "0 2 * * *", ', "")
    code, output = run("-o", "json", write("noschedule.yaml", text))
    assert code == 1
    (problem,) = json.loads(output)[0]["problems"]
    assert problem["path"] == "spec.schedule"
    assert "value" not in problem


def test_a_list_of_objects_is_expanded(write: Write) -> None:
    listed = "apiVersion: v1\nkind: List\nitems:\n" + "\n".join(
        "- " + line if i == 0 else "  " + line for i, line in enumerate(GOOD.splitlines())
    )
    code, output = run(write("list.yaml", listed))
    assert code == 0
    assert "billing/nightly-report" in output


def test_the_shipped_examples_are_valid_one_per_bucket() -> None:
    assert [p.name for p in EXAMPLES] == [
        "queue-poller.yaml",
        "refresh-cache.yaml",
        "send-invoices.yaml",
    ]
    code, output = run("-o", "json", *map(str, EXAMPLES))
    assert code == 0, output
    verdicts = json.loads(output)
    assert all(v["verdict"] == "ok" and v["namespace"] == "" for v in verdicts)
    buckets = set()
    for path in EXAMPLES:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert doc["spec"]["group"] == "example-app"
        buckets.add(doc["spec"]["bucket"])
    assert buckets == {"every-replica", "once-per-tick", "single-owner"}
