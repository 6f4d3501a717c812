"""The operator image of the commit under test, for the tests that run it as a cluster does.

`operator_image()` is `make image` (e2e/containers/build-image.sh) run once per test session:
podman or docker reuse every layer but leasecron's own (about 10 s when only its code
changed), so the image always holds the code under test. `LEASECRON_IMAGE` names an image to
use instead (built elsewhere; nothing is built then). `save_archive()` writes it as a
docker-archive, the form `ctr images import` reads.

Owns only the build and export; the engine is e2e/_containers.py's.
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from _containers import ROOT, Engine

IMAGE_ENV = "LEASECRON_IMAGE"
DEFAULT_TAG = "leasecron/operator:dev"


@dataclass(frozen=True, kw_only=True)
class OperatorImage:
    """A built operator image: the engine holding it and its reference there."""

    engine: Engine
    reference: str

    @property
    def repository(self) -> str:
        return self.reference.rpartition(":")[0]

    @property
    def tag(self) -> str:
        return self.reference.rpartition(":")[2]

    def save_archive(self, path: Path) -> Path:
        """The image as a docker-archive at `path` (kept when it already holds this image)."""
        image_id = self.engine.run("image", "inspect", "--format", "{{.Id}}", self.reference)
        stamp = path.with_suffix(".id")
        if path.exists() and stamp.exists() and stamp.read_text() == image_id.stdout:
            return path
        path.unlink(missing_ok=True)
        flags = ["--format", "docker-archive"] if self.engine.name == "podman" else []
        self.engine.run("save", *flags, "-o", str(path), self.reference, timeout=300)
        stamp.write_text(image_id.stdout)
        return path


@functools.cache
def operator_image() -> OperatorImage | str:
    """The image under test, built once per session; or why there is none (a sentence)."""
    engine, reason = Engine.find()
    if engine is None:
        return reason
    given = os.environ.get(IMAGE_ENV)
    if given:
        if not engine.image_exists(given):
            return f"{IMAGE_ENV}={given}: no such image in {engine.name}"
        return OperatorImage(engine=engine, reference=given)
    inspected = engine.run("image", "inspect", "--format", "{{.Id}}", DEFAULT_TAG, check=False)
    previous = inspected.stdout.strip() if inspected.returncode == 0 else ""
    completed = subprocess.run(
        ["bash", str(ROOT / "e2e" / "containers" / "build-image.sh"), DEFAULT_TAG],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if completed.returncode != 0:
        raise AssertionError(f"make image failed:\n{completed.stderr[-4000:]}")
    built = OperatorImage(engine=engine, reference=DEFAULT_TAG)
    current = engine.run("image", "inspect", "--format", "{{.Id}}", DEFAULT_TAG).stdout.strip()
    if previous and previous != current:  # the image of an earlier commit, now untagged
        engine.run("rmi", previous, check=False)
    return built
