"""The operator image run the way a cluster's container runtime runs it: containerd, CRI-O and
Docker add no passwd entry for the uid of `runAsUser` (podman does, unless `--passwd=false`).
The operator names its process with `getpass.getuser()` (kopf's `peering.detect_own_id`),
which raises KeyError for a uid without an entry and no USER/LOGNAME: the operator then
crash-loops right after it wins its election on every real cluster.

Part of `make test` where a container engine runs images (the image is built once per session,
see _operator_image.py); skipped, with the reason, where there is none.
"""

from __future__ import annotations

import pytest

from _operator_image import OperatorImage, operator_image

pytestmark = pytest.mark.e2e

IDENTITY = (
    "from kopf._core.engines.peering import detect_own_id; "
    "import os; print(os.getuid(), detect_own_id(manual=False))"
)


@pytest.fixture(scope="module")
def image() -> OperatorImage:
    found = operator_image()
    if isinstance(found, str):
        pytest.skip(found)
    return found


def run_as_a_cluster_does(image: OperatorImage, *, user: str, code: str) -> str:
    """`python -c code` in the image as uid:gid `user`, restricted as the chart runs it, with
    no passwd entry added by the engine; its output (fails on a non-zero exit)."""
    engine = image.engine
    no_entry = ["--passwd=false"] if engine.name == "podman" else []
    completed = engine.run(
        "run",
        "--rm",
        *no_entry,
        *engine.run_flags,
        "--user",
        user,
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--network",
        "none",
        "--entrypoint",
        "python",
        image.reference,
        "-c",
        code,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    return completed.stdout.strip()


def test_the_operator_names_its_process_as_uid_65532_without_an_added_passwd_entry(
    image: OperatorImage,
) -> None:
    uid, identity = run_as_a_cluster_does(image, user="65532:65532", code=IDENTITY).split()
    assert uid == "65532"
    assert identity.startswith("nonroot@")


def test_uid_65532_has_its_own_passwd_and_group_entries_in_the_image(
    image: OperatorImage,
) -> None:
    code = "import grp, pwd; print(pwd.getpwuid(65532).pw_name, grp.getgrgid(65532).gr_name)"
    assert run_as_a_cluster_does(image, user="65532:65532", code=code) == "nonroot nonroot"


def test_the_operator_names_its_process_under_a_uid_the_image_does_not_know(
    image: OperatorImage,
) -> None:
    """runAsUser set to another uid (OpenShift assigns one per namespace)."""
    uid, identity = run_as_a_cluster_does(image, user="1000680000:0", code=IDENTITY).split()
    assert uid == "1000680000"
    assert identity.startswith("nonroot@")
