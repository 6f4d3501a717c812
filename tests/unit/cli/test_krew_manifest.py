"""The krew manifest of `kubectl leasecron` is well formed, names the package version, and its
entry point (plugins/kubectl-leasecron) runs the plugin of the installed package."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from leasecron import __version__

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = ROOT / "plugins" / "leasecron.yaml"
SHIM = ROOT / "plugins" / "kubectl-leasecron"


def test_the_manifest_is_a_krew_plugin_of_this_version_whose_files_exist() -> None:
    plugin = yaml.safe_load(MANIFEST.read_text(encoding="utf-8"))
    assert plugin["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert plugin["kind"] == "Plugin" and plugin["metadata"]["name"] == "leasecron"
    assert plugin["spec"]["version"] == f"v{__version__}"
    assert f"/v{__version__}/" in plugin["spec"]["platforms"][0]["uri"]
    for platform in plugin["spec"]["platforms"]:
        assert platform["bin"] == "kubectl-leasecron"
        assert len(platform["sha256"]) == 64
        for entry in platform["files"]:
            assert (ROOT / entry["from"]).exists(), entry["from"]


def test_the_shim_runs_the_plugin_of_the_installed_package() -> None:
    env = {**os.environ, "LEASECRON_PYTHON": sys.executable}
    result = subprocess.run(
        [str(SHIM), "--version"], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"kubectl leasecron, version {__version__}"
