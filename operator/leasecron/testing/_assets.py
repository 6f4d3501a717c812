"""Where the control-plane binaries are: etcd, kube-apiserver, kube-controller-manager,
kubectl and helm.

Lookup order: `$LEASECRON_ASSETS` (every binary from there, nothing else), else
`$KUBEBUILDER_ASSETS` (the envtest convention; a binary it lacks, such as helm or
kube-controller-manager, falls back to the cache), else the cache that
`e2e/controlplane/build.sh` fills, `${XDG_CACHE_HOME:-~/.cache}/leasecron/k8s-v1.36.3/`.
Owns the lookup, in a checkout of the repository running the build, and `run_helm` (helm
with homes of its own). Does not check that a binary is the version it claims to be.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from leasecron.testing._processes import ControlPlaneError

KUBERNETES_VERSION = "v1.36.3"
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "helm")
SERVER_BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager")
_BUILD_HINT = "run `make controlplane` (e2e/controlplane/build.sh) to build them"


def cache_dir() -> Path:
    """The default asset directory that `e2e/controlplane/build.sh` fills."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "leasecron" / f"k8s-{KUBERNETES_VERSION}"


@dataclass(frozen=True, kw_only=True)
class Assets:
    """Resolved binaries; a binary that was not found is absent from `paths`."""

    paths: dict[str, Path] = field(default_factory=dict)
    searched: tuple[Path, ...] = ()

    def binary(self, name: str) -> Path:
        """The path of `name`, or ControlPlaneError naming it and the directories searched."""
        path = self.paths.get(name)
        if path is None:
            raise self.not_found(name)
        return path

    def not_found(self, name: str) -> ControlPlaneError:
        where = ", ".join(str(d) for d in self.searched) or "nowhere"
        return ControlPlaneError(
            f"{name} binary not found (searched {where}); {_BUILD_HINT}", component=name
        )

    @property
    def path_dirs(self) -> list[Path]:
        """Directories to put first on PATH so `kubectl` and `helm` are these binaries."""
        dirs: list[Path] = []
        for name in ("kubectl", "helm", *SERVER_BINARIES):
            path = self.paths.get(name)
            if path is not None and path.parent not in dirs:
                dirs.append(path.parent)
        return dirs

    def missing(self, names: tuple[str, ...] = BINARIES) -> list[str]:
        return [name for name in names if name not in self.paths]


def run_helm(
    binary: Path,
    *args: str,
    home: Path,
    kubeconfig: Path | None = None,
    timeout: float = 120.0,
) -> subprocess.CompletedProcess[str]:
    """`helm ARGS` with its cache, config and data homes under `home`, so nothing of the
    user's helm configuration leaks in; stdout and stderr captured, the exit code left for
    the caller to judge."""
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return subprocess.run(
        [str(binary), *args], env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _executable(directory: Path, name: str) -> Path | None:
    candidate = directory / name
    return candidate if candidate.is_file() and os.access(candidate, os.X_OK) else None


def find_assets() -> Assets:
    """Resolve every binary per the lookup order in this module's docstring; never raises."""
    explicit = os.environ.get("LEASECRON_ASSETS")
    if explicit:
        directories = [Path(explicit)]
    else:
        envtest = os.environ.get("KUBEBUILDER_ASSETS")
        directories = [Path(envtest), cache_dir()] if envtest else [cache_dir()]
    paths: dict[str, Path] = {}
    for name in BINARIES:
        for directory in directories:
            found = _executable(directory, name)
            if found is not None:
                paths[name] = found
                break
    return Assets(paths=paths, searched=tuple(directories))


def _build_script() -> Path | None:
    """`e2e/controlplane/build.sh` when this package runs from a checkout of the repository."""
    for parent in Path(__file__).resolve().parents:
        script = parent / "e2e" / "controlplane" / "build.sh"
        if script.is_file():
            return script
    return None


def ensure_assets(*, names: tuple[str, ...] = BINARIES) -> Assets:
    """Like `find_assets`, but builds missing binaries when the repository's build script is
    at hand (15-30 min the first time); otherwise raises ControlPlaneError saying what to run."""
    assets = find_assets()
    missing = assets.missing(names)
    if not missing:
        return assets
    script = _build_script()
    if script is None:
        raise assets.not_found(missing[0])
    completed = subprocess.run(["bash", str(script)], stdout=subprocess.DEVNULL, check=False)
    if completed.returncode != 0:
        raise ControlPlaneError(
            f"building the control plane failed ({script} exited {completed.returncode})",
            component="build",
        )
    assets = find_assets()
    still_missing = assets.missing(names)
    if still_missing:
        raise assets.not_found(still_missing[0])
    return assets
