"""The distribution as an application installs it: `pip install leasecron`, no extras.

Builds the sdist and, from it, the wheel (`uv build`), installs the wheel without extras into
a fresh virtual environment and checks there that the optional dependencies stayed out
(kopf, cryptography, pytest), that the CLI names the extra a subcommand needs, and that an
application's Scheduler runs a once-per-tick job against the local control plane without
importing the operator, the test helpers, the benchmarks or the demo. Everything is resolved
through uv's cache, so a warm run costs a few seconds beyond the job itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from leasecron.models.names import GROUP, SCHEDULEDJOB_PLURAL, VERSION, jobrun_name
from leasecron.testing.handlers import scheduled_job, wait_for_jobruns

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
OPTIONAL = ("kopf", "cryptography", "pytest")
NOT_FOR_APPS = (
    "kopf",
    "cryptography",
    "pytest",
    "leasecron.operator",
    "leasecron.testing",
    "leasecron.bench",
    "leasecron.demo",
    "leasecron.cli",
)

# Runs in the clean environment: an application with one once-per-tick job whose handler
# writes the tick to a file. Prints the modules it imported as JSON on its last line.
APP = """
import json, pathlib, sys, threading
import leasecron

namespace, out = sys.argv[1], pathlib.Path(sys.argv[2])
done = threading.Event()
scheduler = leasecron.Scheduler("packaging", namespace=namespace, grace_period=5)

@scheduler.job("touch")
def touch(ctx: leasecron.JobContext) -> None:
    out.write_text(f"{ctx.tick.isoformat()} {ctx.token} {ctx.holder}")
    done.set()

scheduler.start()
try:
    ran = done.wait(45)
finally:
    scheduler.stop()
print(json.dumps({"ran": ran, "identity": scheduler.identity, "modules": sorted(sys.modules)}))
"""


@dataclass(frozen=True, kw_only=True)
class CleanEnv:
    """A virtual environment holding only `leasecron` (the built wheel) and its dependencies."""

    root: Path
    wheel: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def run(
        self, *args: str | Path, env: dict[str, str] | None = None, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(a) for a in args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            env={"PATH": f"{self.root / 'bin'}:/usr/bin:/bin", "HOME": os.environ["HOME"]}
            | (env or {}),
        )


def uv(*args: str | Path, timeout: float = 240) -> str:
    completed = subprocess.run(
        [sys.executable, "-m", "uv", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert completed.returncode == 0, f"uv {' '.join(map(str, args))}:\n{completed.stderr}"
    return completed.stdout


@pytest.fixture(scope="module")
def clean_env(tmp_path_factory: pytest.TempPathFactory) -> CleanEnv:
    work = tmp_path_factory.mktemp("packaging")
    # A copy of what the build reads: setuptools writes its egg-info next to the sources, and
    # one in the checkout would be seen as a second installed leasecron.
    source = work / "src"
    shutil.copytree(
        ROOT / "operator",
        source / "operator",
        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, source / name)
    dist = work / "dist"
    uv("build", "--quiet", "--out-dir", dist, source)
    wheels = sorted(dist.glob("leasecron-*.whl"))
    sdists = sorted(dist.glob("leasecron-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, f"uv build made {sorted(dist.iterdir())}"
    venv = work / "venv"
    uv("venv", "--quiet", "--python", sys.executable, venv)
    uv("pip", "install", "--quiet", "--python", venv / "bin" / "python", wheels[0])
    return CleanEnv(root=venv, wheel=wheels[0])


def installed(env: CleanEnv, modules: Sequence[str]) -> dict[str, bool]:
    probe = (
        "import importlib.util, json, sys; "
        "print(json.dumps({m: importlib.util.find_spec(m) is not None for m in sys.argv[1:]}))"
    )
    completed = env.run(env.python, "-c", probe, *modules)
    assert completed.returncode == 0, completed.stderr
    found: dict[str, bool] = json.loads(completed.stdout)
    return found


def test_the_wheel_without_extras_installs_neither_kopf_nor_cryptography_nor_pytest(
    clean_env: CleanEnv,
) -> None:
    found = installed(clean_env, [*OPTIONAL, "kubernetes", "leasecron", "click"])
    assert found == {
        "kopf": False,
        "cryptography": False,
        "pytest": False,
        "kubernetes": True,
        "leasecron": True,
        "click": True,
    }


def test_installing_leasecron_registers_no_pytest_plugin(clean_env: CleanEnv) -> None:
    probe = (
        "import importlib.metadata as m; "
        "print([e.value for e in m.entry_points(group='pytest11') if 'leasecron' in e.value])"
    )
    completed = clean_env.run(clean_env.python, "-c", probe)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "[]"


def test_the_cli_names_the_extra_a_subcommand_needs_and_runs_the_ones_that_need_none(
    clean_env: CleanEnv,
) -> None:
    leasecron = clean_env.root / "bin" / "leasecron"
    refused = clean_env.run(leasecron, "operator", "--namespace", "x")
    assert refused.returncode == 1
    assert "needs the operator extra" in refused.stderr
    assert "pip install 'leasecron[operator]'" in refused.stderr
    assert "Traceback" not in refused.stderr
    cluster = clean_env.run(leasecron, "cluster", "up")
    assert cluster.returncode == 1
    assert "pip install 'leasecron[testing]'" in cluster.stderr
    listed = clean_env.run(leasecron, "--help")
    assert listed.returncode == 0
    assert "(needs leasecron[operator])" in listed.stdout
    jobs = sorted(str(p) for p in (ROOT / "examples" / "jobs").glob("*.yaml"))
    validated = clean_env.run(leasecron, "validate", *jobs)
    assert validated.returncode == 0, validated.stdout + validated.stderr


def test_an_application_runs_a_scheduler_from_the_bare_install_without_the_operator_or_tools(
    clean_env: CleanEnv,
    kubeconfig: Path,
    kube_api: Any,
    namespace: str,
    leasecron_crds: list[str],
    tmp_path: Path,
) -> None:
    manifest = scheduled_job("touch", schedule="@every 1s", group="packaging")
    client.CustomObjectsApi(kube_api).create_namespaced_custom_object(
        GROUP, VERSION, namespace, SCHEDULEDJOB_PLURAL, manifest
    )
    app, out = tmp_path / "app.py", tmp_path / "ran.txt"
    app.write_text(APP)
    completed = clean_env.run(
        clean_env.python, app, namespace, out, env={"KUBECONFIG": str(kubeconfig)}, timeout=90
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert report["ran"], completed.stderr[-3000:]
    tick, token, holder = out.read_text().split()
    assert holder == report["identity"] and int(token) >= 1
    leaked = sorted(
        m for m in report["modules"] if any(m == f or m.startswith(f"{f}.") for f in NOT_FOR_APPS)
    )
    assert leaked == []
    name = jobrun_name("touch", datetime.fromisoformat(tick))
    runs = wait_for_jobruns(
        kube_api,
        namespace=namespace,
        until=lambda items: any(
            i["metadata"]["name"] == name and (i.get("status") or {}).get("outcome") == "Succeeded"
            for i in items
        ),
    )
    (run,) = (r for r in runs if r["metadata"]["name"] == name)
    assert run["spec"]["holder"] == holder and run["spec"]["fencingToken"] == int(token)
