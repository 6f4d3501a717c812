"""`kubectl leasecron` against the real API server, with no operator running: `status` fills
its columns from the job's Lease and JobRuns and says so, `leases` shows who holds what with
the token and the tick, `runs JOB` lists the runs, `-o json|yaml` print the objects, and
`--kubeconfig`/`--context`/`-n`/`-A` select the cluster and namespaces as kubectl does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from leasecron.cli import kubectl_plugin
from leasecron.cli._status import NO_OPERATOR
from leasecron.models.groups import shard_ref
from leasecron.models.shards import DEFAULT_SHARDS

pytestmark = pytest.mark.integration


def plugin(*args: str) -> Result:
    return CliRunner().invoke(kubectl_plugin, list(args))


def test_status_without_an_operator_reads_the_lease_and_jobruns_and_says_so(
    kubeconfig: Path, namespace: str, one_run: str
) -> None:
    result = plugin("status", "--kubeconfig", str(kubeconfig), "-n", namespace, "-o", "wide")
    assert result.exit_code == 0, result.output
    header, row = result.stdout.splitlines()
    assert header.split()[:3] == ["NAME", "BUCKET", "HOLDER"]
    cells = row.split()
    assert cells[0] == one_run and cells[1] == "once-per-tick"
    assert "Succeeded" in cells and "@every" in cells
    assert NO_OPERATOR in result.stderr


def test_leases_show_the_token_and_tick_of_the_shard_lease_and_the_group_record(
    kubeconfig: Path, namespace: str, one_run: str
) -> None:
    result = plugin("leases", "--kubeconfig", str(kubeconfig), "-n", namespace)
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert not [r for r in rows if r[1] == "job"]  # a once-per-tick job has no Lease of its own
    shards = {r[0]: r for r in rows if r[1] == "shard"}
    assert len(shards) == DEFAULT_SHARDS  # made with the group record
    _name, _role, group, _holder, token, *_, tick = shards[
        shard_ref("default", one_run, shards=DEFAULT_SHARDS).lease
    ]
    assert (group, token, tick) == ("default", "1", "2026-03-01T02:00:00Z")
    assert [r[0] for r in rows if r[1] == "group"] == ["leasecron-group-default"]


def test_runs_lists_the_jobs_runs_as_a_table_json_and_yaml(
    kubeconfig: Path, namespace: str, one_run: str
) -> None:
    table = plugin("runs", one_run, "--kubeconfig", str(kubeconfig), "-n", namespace)
    assert table.exit_code == 0, table.output
    [row] = [line.split() for line in table.stdout.splitlines()[1:]]
    assert row[0] == f"{one_run}-20260301020000" and row[3] == "1" and row[4] == "Succeeded"

    as_json = json.loads(
        plugin(
            "runs", one_run, "--kubeconfig", str(kubeconfig), "-n", namespace, "-o", "json"
        ).stdout
    )
    as_yaml = yaml.safe_load(
        plugin(
            "runs", one_run, "--kubeconfig", str(kubeconfig), "-n", namespace, "-o", "yaml"
        ).stdout
    )
    assert as_json == as_yaml
    assert as_json["kind"] == "List"
    assert [i["spec"]["fencingToken"] for i in as_json["items"]] == [1]


def test_all_namespaces_adds_the_namespace_column_and_context_selects_the_cluster(
    kubeconfig: Path, namespace: str, one_run: str
) -> None:
    context = yaml.safe_load(kubeconfig.read_text())["current-context"]
    result = plugin("leases", "--kubeconfig", str(kubeconfig), "--context", context, "-A")
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0].split()[0] == "NAMESPACE"
    assert any(line.startswith(namespace) for line in result.stdout.splitlines())

    wrong = plugin("status", "--kubeconfig", str(kubeconfig), "--context", "no-such-context")
    assert wrong.exit_code == 1
    assert "no-such-context" in wrong.output
    assert "Traceback" not in wrong.output


def test_version_is_the_package_version() -> None:
    from leasecron import __version__

    result = plugin("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"kubectl leasecron, version {__version__}"
