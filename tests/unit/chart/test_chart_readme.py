"""The chart README's values table is generated from values.yaml (charts/render_readme.py) and
is current: a value added, removed or re-described without re-rendering fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "leasecron"


def _renderer() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "render_readme", ROOT / "charts" / "render_readme.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_chart_readme_values_table_is_current() -> None:
    render = _renderer()
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    values = (CHART / "values.yaml").read_text(encoding="utf-8")
    assert render.rendered_readme(readme, values) == readme, (
        "charts/leasecron/README.md is out of date: run python charts/render_readme.py"
    )


def test_the_table_has_one_row_per_leaf_value_with_its_comment() -> None:
    table = _renderer().values_table(
        "# Top.\ntop:\n  # How many.\n  count: 2\n  # Names,\n  # one per line.\n  names: []\n"
    )
    assert table.splitlines()[2:] == [
        "| `top.count` | int | `2` | How many. |",
        "| `top.names` | list | `[]` | Names, one per line. |",
    ]


def test_a_changed_comment_makes_the_readme_stale() -> None:
    render = _renderer()
    readme = (CHART / "README.md").read_text(encoding="utf-8")
    values = (CHART / "values.yaml").read_text(encoding="utf-8")
    changed = values.replace("# Number of operator replicas.", "# How many operators.", 1)
    assert changed != values
    assert render.rendered_readme(readme, changed) != readme


def test_every_relative_link_of_the_readmes_points_at_a_file_of_the_repository() -> None:
    import re

    missing = []
    for readme in (ROOT / "README.md", CHART / "README.md", ROOT / "docs" / "rbac.md"):
        for target in re.findall(r"\]\(([^)#\s]+)", readme.read_text(encoding="utf-8")):
            if "://" not in target and not (readme.parent / target).exists():
                missing.append(f"{readme.relative_to(ROOT)}: {target}")
    assert missing == []
