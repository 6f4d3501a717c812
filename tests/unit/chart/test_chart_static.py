"""The Helm chart's files on their own, without helm: values.yaml is documented and valid, the
schema is strict, and the chart carries an exact copy of the repository's CRDs."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from leasecron import __version__

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "leasecron"
CRDS = ROOT / "crds"
EXPECTED_CRDS = ("jobruns.leasecron.dev.yaml", "scheduledjobs.leasecron.dev.yaml")
REFRESH_HINT = "refresh the chart's copy with charts/leasecron/sync-crds.sh"


def _values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
    return schema


def _errors(values: dict[str, Any]) -> list[str]:
    schema = _schema()
    validator_class = jsonschema.validators.validator_for(schema)
    validator = validator_class(schema)
    return [
        f"{'.'.join(str(p) for p in error.absolute_path) or '<root>'}: {error.message}"
        for error in validator.iter_errors(values)
    ]


def _keys(node: yaml.Node | None) -> Iterator[yaml.Node]:
    """Every mapping key of a composed YAML document, depth first."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield from _keys(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            yield from _keys(item)


def _objects(schema: dict[str, Any], path: str = "<root>") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every sub-schema that declares `properties`, with its dotted path."""
    if "properties" in schema:
        yield path, schema
        for name, child in schema["properties"].items():
            yield from _objects(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from _objects(schema["items"], f"{path}[]")


def test_the_default_values_satisfy_the_values_schema() -> None:
    assert _errors(_values()) == []


def test_the_values_schema_is_itself_a_valid_json_schema() -> None:
    schema = _schema()
    jsonschema.validators.validator_for(schema).check_schema(schema)


def test_every_object_in_the_values_schema_forbids_unknown_keys() -> None:
    lenient = [
        path for path, sub in _objects(_schema()) if sub.get("additionalProperties") is not False
    ]
    assert lenient == []


@pytest.mark.parametrize(
    ("override", "complaint"),
    [
        ({"replicaCount": 2, "replicas": 3}, "'replicas' was unexpected"),
        ({"image": {"repository": "x", "pullpolicy": "Always"}}, "'pullpolicy' was unexpected"),
        ({"operator": {"logLevel": "verbose"}}, "'verbose' is not one of"),
        ({"operator": {"election": {"leaseDuration": "15"}}}, "does not match"),
        ({"operator": {"namespaces": ["Not_A_Namespace"]}}, "does not match"),
        ({"app": {"serviceAccounts": [{"namespace": "billing"}]}}, "'name' is a required property"),
        ({"podDisruptionBudget": {"minAvailable": "half"}}, "does not match"),
    ],
)
def test_the_values_schema_rejects_misspelled_or_malformed_values(
    override: dict[str, Any], complaint: str
) -> None:
    values = _values()
    for key, value in override.items():
        values[key] = {**values[key], **value} if isinstance(value, dict) else value
    errors = _errors(values)
    assert any(complaint in error for error in errors), errors


def test_every_key_in_values_yaml_has_a_comment_line_above_it() -> None:
    text = (CHART / "values.yaml").read_text()
    lines = text.splitlines()
    undocumented = [
        f"line {key.start_mark.line + 1}: {key.value}"
        for key in _keys(yaml.compose(text))
        if key.start_mark.line == 0 or not lines[key.start_mark.line - 1].lstrip().startswith("#")
    ]
    assert undocumented == []


def test_the_chart_app_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart["apiVersion"], chart["version"], chart["appVersion"]) == (
        "v2",
        "0.1.0",
        __version__,
    )


def test_the_repository_has_the_two_crd_files_the_chart_copies() -> None:
    present = sorted(path.name for path in CRDS.glob("*.yaml"))
    assert present == list(EXPECTED_CRDS)


def test_the_chart_crds_are_a_byte_for_byte_copy_of_the_repository_crds() -> None:
    source = {path.name: path.read_bytes() for path in CRDS.glob("*.yaml")}
    copy = {path.name: path.read_bytes() for path in (CHART / "files" / "crds").glob("*.yaml")}
    missing = sorted(source.keys() - copy.keys())
    extra = sorted(copy.keys() - source.keys())
    different = sorted(name for name in source.keys() & copy.keys() if source[name] != copy[name])
    assert not (missing or extra or different), (
        f"charts/leasecron/files/crds/ differs from crds/ (missing {missing}, extra {extra}, "
        f"different {different}): {REFRESH_HINT}"
    )
