"""The project's shape rule for the in-pod library: no class over 300 lines, no function or
method over 60 (from its `def`/`class` line to the end of its body, docstring included).

The library is `leasecron/{models,kube,coordination,runtime}/` and the top-level modules
`leasecron/*.py`. `STILL_TO_SPLIT` is what remains to split: an offender missing from it fails
the test, and so does an entry that is no longer an offender, so the list can only shrink.
Entries are `<path under leasecron/>:<qualified name>`, e.g. `runtime/_shards.py:ShardTicks`
or `runtime/_shards.py:ShardTicks._claim` (nested functions are named through their parents).
And two rules of one path: the one claim write is not specialised by subclassing (nothing in
the library derives from `TickLock`), and ticks are planned by one timer.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import leasecron

CLASS_LIMIT = 300
FUNCTION_LIMIT = 60
PACKAGES = ("models", "kube", "coordination", "runtime")

STILL_TO_SPLIT: frozenset[str] = frozenset()

_ROOT = Path(leasecron.__file__).parent


def library_modules() -> Iterator[Path]:
    """The modules the rule covers: the top-level ones and those of the library packages."""
    yield from sorted(_ROOT.glob("*.py"))
    for package in PACKAGES:
        yield from sorted((_ROOT / package).rglob("*.py"))


def parsed(paths: Iterable[Path]) -> Iterator[tuple[str, ast.Module]]:
    """Each module of `paths` as `<path under leasecron/>` and its syntax tree."""
    for path in paths:
        yield path.relative_to(_ROOT).as_posix(), ast.parse(path.read_text(encoding="utf-8"))


def _definitions(
    node: ast.AST, prefix: str
) -> Iterator[tuple[str, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _definitions(child, f"{name}.")
        else:
            yield from _definitions(child, prefix)


def offenders(path: Path) -> dict[str, int]:
    """Each class over CLASS_LIMIT lines and each function over FUNCTION_LIMIT in `path`, as
    `<path under leasecron/>:<qualified name>` -> its length in lines."""
    where = path.relative_to(_ROOT).as_posix()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = {}
    for name, node in _definitions(tree, ""):
        assert node.end_lineno is not None
        length = node.end_lineno - node.lineno + 1
        limit = CLASS_LIMIT if isinstance(node, ast.ClassDef) else FUNCTION_LIMIT
        if length > limit:
            found[f"{where}:{name}"] = length
    return found


def all_offenders() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in library_modules():
        found.update(offenders(path))
    return found


def test_the_rule_covers_the_library_packages_and_top_level_modules() -> None:
    covered = {path.relative_to(_ROOT).parts[0] for path in library_modules()}
    assert set(PACKAGES) <= covered
    assert "__init__.py" in covered


def test_no_class_or_function_is_over_its_limit_unless_still_to_split() -> None:
    new = {name: length for name, length in all_offenders().items() if name not in STILL_TO_SPLIT}
    assert not new, (
        f"over the shape rule (classes <= {CLASS_LIMIT} lines, functions <= {FUNCTION_LIMIT}); "
        f"split them rather than listing them: {dict(sorted(new.items()))}"
    )


def test_every_entry_still_to_split_is_still_over_its_limit() -> None:
    gone = sorted(STILL_TO_SPLIT - set(all_offenders()))
    assert not gone, f"no longer over the shape rule: remove from STILL_TO_SPLIT: {gone}"


def test_nothing_subclasses_the_claim_lock() -> None:
    """Every kind of Lease is claimed by the one `TickLock` write; what a kind adds comes as
    its `ClaimRules` (docs/design.md §5.4), never as a subclass overriding the lock's steps."""
    subclasses = []
    for where, tree in parsed(library_modules()):
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base).rsplit(".", 1)[-1] for base in node.bases}
                if "TickLock" in bases:
                    subclasses.append(f"{where}:{node.name}")
    assert not subclasses, f"subclasses of TickLock (give it ClaimRules instead): {subclasses}"


def test_the_runtime_plans_ticks_in_one_timer() -> None:
    """One tick timer for every scheduled job (docs/design.md §5.3): `_planning.next_tick` is
    called from `runtime/_shard_timer.py` alone, not by a second loop beside it."""
    callers = set()
    for where, tree in parsed(library_modules()):
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and ast.unparse(node.func) == "next_tick":
                callers.add(where)
    assert callers == {"runtime/_shard_timer.py"}, callers


def test_the_claim_engine_claims_in_one_loop() -> None:
    """Scheduled instants, catch-up, `run_once`, run requests and handed-over retries are
    claimed by one loop around the claim write (`_shard_claims._claim_until`); a guard's
    attempt per call (decided again once after a conflict, `_guard_engine._try_claim`) is the
    other caller of `try_claim` (docs/design.md §5.4, §5.15)."""
    callers = set()
    for where, tree in parsed(sorted((_ROOT / "runtime").glob("*.py"))):
        for name, node in _definitions(tree, ""):
            calls = (n for n in ast.walk(node) if isinstance(n, ast.Call))
            if any(ast.unparse(c.func).endswith(".try_claim") for c in calls):
                callers.add(f"{where}:{name}")
    # A function's callers include its enclosing definitions: keep the innermost.
    innermost = {c for c in callers if not any(o.startswith(c + ".") for o in callers)}
    assert innermost == {
        "runtime/_shard_claims.py:_attempt",
        "runtime/_guard_engine.py:_try_claim",
    }, innermost
