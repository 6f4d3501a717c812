"""Which container engine `make image` uses (e2e/containers/engine.sh), with stand-in
`docker` and `podman` commands on PATH: docker only when its daemon answers, else podman, and
a reason when there is neither."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "e2e" / "containers" / "engine.sh"


def stub(directory: Path, name: str, *, exit_code: int) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\nexit {exit_code}\n")
    path.chmod(0o755)


def choose(path_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    tools = path_dir / "tools"
    tools.mkdir(exist_ok=True)
    for tool in ("bash", "sh"):
        (tools / tool).unlink(missing_ok=True)
        (tools / tool).symlink_to(Path("/bin") / tool)
    return subprocess.run(
        ["/bin/bash", str(SCRIPT)],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": f"{path_dir}:{tools}", **env},
    )


def test_docker_is_chosen_when_its_daemon_answers(tmp_path: Path) -> None:
    stub(tmp_path, "docker", exit_code=0)
    stub(tmp_path, "podman", exit_code=0)
    assert choose(tmp_path).stdout.strip() == "docker"


def test_a_docker_client_without_a_daemon_gives_way_to_podman(tmp_path: Path) -> None:
    stub(tmp_path, "docker", exit_code=1)
    stub(tmp_path, "podman", exit_code=0)
    assert choose(tmp_path).stdout.strip() == "podman"


def test_without_an_engine_the_reason_names_what_is_missing(tmp_path: Path) -> None:
    stub(tmp_path, "docker", exit_code=1)
    chosen = choose(tmp_path)
    assert chosen.returncode == 1
    assert "docker is installed but its daemon does not answer" in chosen.stderr
    assert "podman is not installed" in chosen.stderr


def test_container_engine_overrides_the_choice(tmp_path: Path) -> None:
    assert choose(tmp_path, CONTAINER_ENGINE="nerdctl").stdout.strip() == "nerdctl"
