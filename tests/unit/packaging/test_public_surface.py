"""`import leasecron` exports what an application uses; the plumbing lives under its module,
and the names once exported at the top still resolve, with a warning that names their home."""

from __future__ import annotations

import subprocess
import sys

import pytest

import leasecron
import leasecron.coordination

PLUMBING = (
    "BackgroundLoop",
    "ElectionConfig",
    "Elector",
    "Grant",
    "KeepAlive",
    "LockConfig",
    "Skipped",
    "SyncElector",
    "SyncTickLock",
    "Term",
    "TickLock",
    "lease_informer",
    "make_identity",
)


def test_every_exported_name_resolves() -> None:
    for name in leasecron.__all__:
        assert getattr(leasecron, name) is not None, name


def test_the_coordination_plumbing_is_not_part_of_the_top_level_surface() -> None:
    assert not set(PLUMBING) & set(leasecron.__all__)
    assert not set(PLUMBING) & set(dir(leasecron))


@pytest.mark.parametrize("name", PLUMBING)
def test_a_moved_name_still_resolves_to_its_home_with_a_warning_naming_it(name: str) -> None:
    with pytest.warns(DeprecationWarning, match=rf"from leasecron\.coordination import {name}"):
        value = getattr(leasecron, name)
    assert value is getattr(leasecron.coordination, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        leasecron.Nothing  # noqa: B018


def test_importing_leasecron_imports_neither_the_runtime_nor_the_kubernetes_client() -> None:
    code = (
        "import sys, leasecron; "
        "print(sorted(m for m in sys.modules if m.startswith(('leasecron.runtime', 'kubernetes'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_top_level_exports_the_scheduler_the_guard_and_the_run_hooks() -> None:
    import leasecron.runtime

    for name in ("Scheduler", "JobContext", "guard", "Guard", "GuardResult", "RunEvent"):
        assert getattr(leasecron, name) is getattr(leasecron.runtime, name)
    assert set(leasecron.runtime.__all__) <= set(leasecron.__all__)
