"""`leasecron validate` on inputs that are not what it expects: each fails with exit status 1,
the file and the reason (never a traceback, never a silent 0); directories, with -R; and a
setting the job's bucket ignores is a warning on stderr, not a failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from leasecron.cli import main

GOOD = """\
apiVersion: leasecron.dev/v1alpha1
kind: ScheduledJob
metadata: {name: nightly-report, namespace: billing}
spec: {bucket: once-per-tick, schedule: "0 2 * * *"}
"""


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["validate", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"traceback: {result.exception!r}"
    )
    return result.exit_code, result.stdout, result.stderr


def write(path: Path, content: str | bytes) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ("", "empty: no YAML document in it"),
        ("# only a comment\n---\n", "empty: no YAML document in it"),
        (b"kind: ScheduledJob\nmetadata: {name: caf\xe9}\n", "not UTF-8: byte 0xe9 at offset 39"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "not UTF-8: byte 0x89 at offset 0"),
        ("spec: [unclosed\n", "not YAML"),
        (
            GOOD.replace("kind: ScheduledJob", "kind: ScheduledJobs"),
            "ScheduledJobs/nightly-report: kind: 'ScheduledJobs' is not a kind of "
            "leasecron.dev (ScheduledJob or JobRun); did you mean ScheduledJob?",
        ),
        (
            GOOD.replace("kind: ScheduledJob", "kind: CronJob"),
            "CronJob/nightly-report: kind: 'CronJob' is not a kind of leasecron.dev",
        ),
        (GOOD.replace("kind: ScheduledJob\n", ""), "kind: is required"),
        (
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: api}\n",
            "no ScheduledJob in this file (found Deployment/api)",
        ),
    ],
    ids=[
        "empty",
        "only-comments",
        "latin-1",
        "binary",
        "not-yaml",
        "plural-kind",
        "foreign-kind-in-our-group",
        "no-kind",
        "no-scheduledjob",
    ],
)
def test_a_bad_file_fails_with_its_name_and_the_reason(
    tmp_path: Path, content: str | bytes, reason: str
) -> None:
    path = write(tmp_path / "job.yaml", content)
    code, out, _ = run(path)
    assert code == 1
    assert f"{path}: " in out
    assert reason in out


def test_json_output_carries_the_reason_of_an_unreadable_file(tmp_path: Path) -> None:
    path = write(tmp_path / "job.yaml", b"\xff\xfe")
    code, out, _ = run("-o", "json", path)
    assert code == 1
    (verdict,) = json.loads(out)
    assert verdict["verdict"] == "unreadable" and verdict["file"] == path
    assert verdict["error"].startswith("not UTF-8")


def test_a_directory_is_its_manifests_and_r_adds_its_subdirectories(tmp_path: Path) -> None:
    top = write(tmp_path / "jobs" / "report.yaml", GOOD)
    nested = write(
        tmp_path / "jobs" / "team" / "broken.yml", GOOD.replace("0 2 * * *", "61 * * * *")
    )
    write(tmp_path / "jobs" / "notes.txt", "not a manifest")
    write(tmp_path / "jobs" / "deploy.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")

    code, out, _ = run(str(tmp_path / "jobs"))
    assert code == 0, out
    assert f"ok {top}: billing/nightly-report" in out
    assert nested not in out and "notes.txt" not in out

    code, out, _ = run("-R", str(tmp_path / "jobs"))
    assert code == 1
    assert f"{nested}: ScheduledJob/nightly-report: spec.schedule" in out


def test_a_directory_without_any_scheduledjob_fails(tmp_path: Path) -> None:
    write(
        tmp_path / "manifests" / "svc.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"
    )
    code, out, _ = run("-R", str(tmp_path / "manifests"))
    assert code == 1
    assert "no ScheduledJob found" in out


def test_a_lock_on_an_every_replica_job_is_a_warning_on_stderr(tmp_path: Path) -> None:
    text = GOOD.replace(
        "spec: {bucket: once-per-tick, ",
        "spec: {bucket: every-replica, lock: {atMostFor: 1m}, ",
    )
    path = write(tmp_path / "refresh.yaml", text)
    code, out, err = run(path)
    assert code == 0
    assert out == f"ok {path}: billing/nightly-report\n"
    assert err.startswith(
        f"warning: {path}: ScheduledJob/nightly-report: spec.lock is ignored on an "
        "every-replica job"
    )


def test_a_jobrun_is_known_and_skipped(tmp_path: Path) -> None:
    run_doc = "apiVersion: leasecron.dev/v1alpha1\nkind: JobRun\nmetadata: {name: r}\n"
    path = write(tmp_path / "all.yaml", GOOD + "---\n" + run_doc)
    code, out, _ = run(path)
    assert code == 0
    assert f"skip {path}: JobRun/r" in out
