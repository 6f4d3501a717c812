"""The extras split as the CLI and the image lock see it: a subcommand whose extra is missing
is listed and refuses with the install line; the image lock pins exactly the base and
operator dependencies, each with hashes."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest
from click.testing import CliRunner

from leasecron.cli import main

ROOT = Path(__file__).resolve().parents[3]


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name in modules else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_a_subcommand_without_its_extra_exits_1_naming_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide(monkeypatch, "kopf")
    result = CliRunner().invoke(main, ["operator", "--namespace", "billing"])
    assert result.exit_code == 1
    assert "`leasecron operator` needs the operator extra (kopf not installed)" in result.output
    assert "pip install 'leasecron[operator]'" in result.output


def test_a_subcommand_needing_two_extras_names_both(monkeypatch: pytest.MonkeyPatch) -> None:
    hide(monkeypatch, "kopf", "cryptography")
    result = CliRunner().invoke(main, ["bench", "operator"])
    assert result.exit_code == 1
    assert "pip install 'leasecron[operator,testing]'" in result.output


def test_the_help_lists_a_subcommand_whose_extra_is_missing_with_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hide(monkeypatch, "cryptography")
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    commands = result.output.split("Commands:", 1)[1].splitlines()
    lines = {line.split()[0]: line for line in commands if line.strip()}
    assert "(needs leasecron[testing])" in lines["cluster"]
    assert "needs" not in lines["validate"]


def test_the_image_lock_pins_the_base_and_operator_dependencies_with_hashes_and_nothing_else() -> (
    None
):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {
        _name(r) for r in project["dependencies"] + project["optional-dependencies"]["operator"]
    }
    lock = (ROOT / "requirements" / "image.txt").read_text()
    pins = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", lock, flags=re.MULTILINE))
    pinned = {name.lower().replace("_", "-") for name in pins}
    assert wanted <= pinned, f"not in requirements/image.txt (run `make lock`): {wanted - pinned}"
    assert not {"cryptography", "pytest", "leasecron"} & pinned
    entries = re.split(r"\n(?=[A-Za-z0-9_.-]+==)", lock.split("\n", 2)[2].strip())
    assert all("--hash=sha256:" in entry for entry in entries)


def test_an_extra_module_missing_deeper_in_a_subcommand_import_is_named_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> object:
        if name == "leasecron.cli._status":
            raise ModuleNotFoundError("No module named 'cryptography'", name="cryptography")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    result = CliRunner().invoke(main, ["status"])
    assert result.exit_code == 1
    assert "pip install 'leasecron[testing]'" in result.output


def test_a_missing_module_that_no_extra_provides_is_not_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = importlib.import_module

    def import_module(name: str, package: str | None = None) -> object:
        if name == "leasecron.cli._status":
            raise ModuleNotFoundError("No module named 'yaml'", name="yaml")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", import_module)
    result = CliRunner().invoke(main, ["status"])
    assert isinstance(result.exception, ModuleNotFoundError)
