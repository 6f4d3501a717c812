"""MkDocs hook: the field tables of the CRD reference, generated from crds/*.yaml at build time.

A page asks for a table with a marker on a line of its own:

    <!-- crd-fields scheduledjobs.leasecron.dev spec -->

which is replaced by one row per field under that top-level property (`spec` or `status`):
its path, type, default, limits (enum, bounds, lengths, patterns, item counts) and description,
then the rules the API server checks on it (CEL `x-kubernetes-validations`, with their
messages). `<!-- crd-columns NAME -->` gives the printer columns of `kubectl get`.

The YAML in crds/ is the source of truth (itself generated from the pydantic models, a test
fails on drift), so the reference cannot disagree with what the API server enforces. A marker
that names a CRD or a property that does not exist fails the build.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "crds"
MARKER = re.compile(r"^<!-- crd-(fields|columns) ([\w.-]+)(?: (\w+))? -->$", re.MULTILINE)
DURATION = r"^(0|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$"


def _crd(name: str) -> dict[str, Any]:
    path = CRDS / f"{name}.yaml"
    if not path.is_file():
        raise PluginError(f"crd reference: no CRD {path.relative_to(ROOT)}")
    crd: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return crd


def _version(crd: dict[str, Any]) -> dict[str, Any]:
    version: dict[str, Any] = next(v for v in crd["spec"]["versions"] if v.get("storage"))
    return version


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(value: object) -> str:
    text = yaml.safe_dump(value, default_flow_style=True, width=1000).strip()
    text = text.removesuffix("\n...").removesuffix("...").strip()
    return f"`{_cell(text)}`"


def _type(schema: dict[str, Any]) -> str:
    kind = str(schema.get("type", "any"))
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if schema.get("pattern") == DURATION:
        return "duration"
    if "format" in schema:
        return f"{kind} ({schema['format']})"
    return kind


def _limits(schema: dict[str, Any], required: bool) -> str:
    parts = ["required"] if required else []
    if "enum" in schema:
        parts.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    if "minimum" in schema or "maximum" in schema:
        parts.append(f"{schema.get('minimum', '…')} to {schema.get('maximum', '…')}")
    if "minLength" in schema:
        parts.append(f"{schema['minLength']} to {schema.get('maxLength', '…')} characters")
    elif "maxLength" in schema:
        parts.append(f"at most {schema['maxLength']} characters")
    if "maxItems" in schema:
        parts.append(f"at most {schema['maxItems']} items")
    pattern = schema.get("pattern")
    if pattern and pattern != DURATION:
        parts.append(f"matches `{_cell(pattern)}`")
    return "; ".join(parts)


def _rows(schema: dict[str, Any], path: str, rules: list[tuple[str, str]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    required = set(schema.get("required", []))
    for name, child in schema.get("properties", {}).items():
        field = f"{path}.{name}" if path else name
        default = _code(child["default"]) if "default" in child and child["default"] != {} else ""
        rows.append(
            (
                f"`{field}`",
                _type(child),
                default,
                _limits(child, name in required),
                _cell(child.get("description", "")),
            )
        )
        for rule in child.get("x-kubernetes-validations", []):
            rules.append((field, _cell(rule.get("message", rule["rule"]))))
        nested = child.get("items", child) if child.get("type") == "array" else child
        if nested.get("properties"):
            prefix = f"{field}[]" if child.get("type") == "array" else field
            rows.extend(_rows(nested, prefix, rules))
    return rows


def fields_table(name: str, top: str) -> str:
    """The markdown of CRD `name`'s fields under its top-level property `top` (paths
    relative to it: `lock.atMostFor` is `spec.lock.atMostFor`)."""
    schema = _version(_crd(name))["schema"]["openAPIV3Schema"]
    if top not in schema.get("properties", {}):
        raise PluginError(f"crd reference: {name} has no property {top!r}")
    part = schema["properties"][top]
    rules = [
        (top, _cell(r.get("message", r["rule"]))) for r in part.get("x-kubernetes-validations", [])
    ]
    rules += [
        ("the object", _cell(r.get("message", r["rule"])))
        for r in schema.get("x-kubernetes-validations", [])
        if top == "spec"
    ]
    rows = _rows(part, "", rules)
    lines = ["| field | type | default | limits | description |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    if rules:
        lines += ["", "Rules the API server checks (a write that breaks one is refused):", ""]
        lines += [f"- `{field}`: {message}" for field, message in rules]
    return "\n".join(lines)


def columns_table(name: str) -> str:
    """The markdown of CRD `name`'s printer columns (what `kubectl get` shows)."""
    version = _version(_crd(name))
    lines = ["| column | from | shown |", "|---|---|---|"]
    for column in version.get("additionalPrinterColumns", []):
        shown = "with `-o wide`" if column.get("priority", 0) else "always"
        lines.append(f"| {column['name'].upper()} | `{column['jsonPath']}` | {shown} |")
    return "\n".join(lines)


def on_page_markdown(markdown: str, **_: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        kind, name, top = match.groups()
        if kind == "columns":
            return columns_table(name)
        if top is None:
            raise PluginError(f"crd reference: {match.group(0)} names no property")
        return fields_table(name, top)

    return MARKER.sub(replace, markdown)
