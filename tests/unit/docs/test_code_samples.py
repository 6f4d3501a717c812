"""The Python on the documentation pages (docs/**/*.md) and in README.md cannot rot: every
block parses, every leasecron name it imports or uses exists, every file it includes with
`--8<--` exists and parses, and a block that is a whole program (no `...`, no name it does
not define) and asserts something is a test, and runs.

The longer samples are files that other tests run (examples/tutorial/app.py by
tests/integration/test_docs_tutorial.py); the site's strict build (`mkdocs build --strict`)
checks the links, the anchors and the API names of `::: leasecron...` blocks."""

from __future__ import annotations

import ast
import builtins
import importlib
import re
import symtable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
PAGES = sorted(p for p in (ROOT / "docs").rglob("*.md") if "_hooks" not in p.parts)
BLOCK = re.compile(r"^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```", re.S | re.M)
SNIPPET = re.compile(r'^--8<-- "(?P<path>[^"]+)"$', re.M)


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def _blocks() -> list[Block]:
    found = []
    for page in [*PAGES, ROOT / "README.md"]:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            indent = len(match.group("indent"))
            code = "\n".join(line[indent:] for line in match.group("code").splitlines())
            found.append(Block(page, text.count("\n", 0, match.start()) + 1, code))
    return found


BLOCKS = _blocks()


def _leasecron_names(tree: ast.AST) -> list[tuple[str, str | None]]:
    """(module, attribute path or None) for every leasecron name the code imports or uses
    through a name bound to a leasecron module or object."""
    bound: dict[str, tuple[str, str | None]] = {}
    used: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "leasecron":
                    used.append((alias.name, None))
                    bound[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else "leasecron",
                        None,
                    )
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("leasecron"):
            for alias in node.names:
                used.append((node.module or "", alias.name))
                bound[alias.asname or alias.name] = (node.module or "", alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            base = bound.get(node.value.id)
            if base is not None:
                module, path = base
                used.append((module, f"{path}.{node.attr}" if path else node.attr))
    return used


def _resolve(module: str, path: str | None) -> Any:
    value: ModuleType | Any = importlib.import_module(module)
    for part in (path or "").split(".") if path else []:
        try:
            value = getattr(value, part)
        except AttributeError:
            value = importlib.import_module(f"{value.__name__}.{part}")
    return value


def test_the_pages_have_python_blocks_to_check() -> None:
    assert len(BLOCKS) >= 20
    assert {b.page.name for b in BLOCKS} >= {"README.md", "tutorial.md", "schedulers.md"}


@pytest.mark.parametrize("block", BLOCKS, ids=str)
def test_a_python_block_parses_and_every_leasecron_name_in_it_exists(block: Block) -> None:
    for snippet in SNIPPET.finditer(block.code):
        included = ROOT / snippet.group("path")
        assert included.is_file(), f"{block}: includes {included}, which does not exist"
        ast.parse(included.read_text(encoding="utf-8"), filename=str(included))
    code = SNIPPET.sub("", block.code)
    tree = ast.parse(code, filename=str(block))
    missing = []
    for module, path in _leasecron_names(tree):
        try:
            _resolve(module, path)
        except (ImportError, AttributeError) as error:
            missing.append(f"{module}:{path}: {error}")
    assert missing == [], f"{block} uses names that do not exist"


def _whole_program(code: str) -> bool:
    """No `...` placeholder and no name used that the code neither defines nor imports."""
    tree = ast.parse(code)
    if any(isinstance(n, ast.Constant) and n.value is Ellipsis for n in ast.walk(tree)):
        return False
    top = symtable.symtable(code, "<block>", "exec")
    defined = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    tables = [top]
    while tables:
        table = tables.pop()
        tables.extend(table.get_children())
        for symbol in table.get_symbols():
            free = symbol.is_global() or (table is top and not symbol.is_assigned())
            name = symbol.get_name()
            if symbol.is_referenced() and free and name not in defined | set(dir(builtins)):
                return False
    return True


RUNNABLE = [b for b in BLOCKS if "\nassert " in f"\n{b.code}" and _whole_program(b.code)]


def test_some_blocks_are_whole_programs_that_run() -> None:
    assert any(b.page.name == "dst.md" for b in RUNNABLE)


@pytest.mark.parametrize("block", RUNNABLE, ids=str)
def test_a_python_block_that_asserts_runs(block: Block) -> None:
    exec(compile(block.code, str(block), "exec"), {"__name__": "docs_sample"})
