"""The CRDs and the models describe the same fields: names, types, enums, bounds, defaults,
required-ness. And `crds/` holds exactly what `all_crds()` builds."""

from __future__ import annotations

import types
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Union, cast, get_args, get_origin

import annotated_types
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from leasecron.models.specs import (
    KEPT_VALUES,
    REMOVED_FIELDS,
    CatchUpSpec,
    ElectionSpec,
    HistorySpec,
    JobRunSpec,
    JobRunStatus,
    LockSpec,
    ScheduledJobSpec,
    ScheduledJobStatus,
)
from leasecron.operator.crds import all_crds, crd_file_name, jobrun_crd, render, scheduledjob_crd

REPO = Path(__file__).resolve().parents[3]
REGENERATE = "crds/ is out of date: run `python -m leasecron.operator.crds --write crds/`"
# Models whose defaults the API server applies, so the CRD must carry the same ones.
SERVER_DEFAULTED = {ScheduledJobSpec, LockSpec, ElectionSpec, CatchUpSpec, HistorySpec}
MINIMAL: dict[type[BaseModel], dict[str, Any]] = {ScheduledJobSpec: {"bucket": "single-owner"}}


def _schema(crd: dict[str, Any], part: str) -> dict[str, Any]:
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return cast(dict[str, Any], root["properties"][part])


def _strip(annotation: Any) -> tuple[Any, bool]:
    """The annotation without Annotated and None, and whether None was allowed."""
    optional = False
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) < len(get_args(annotation))
        (annotation,) = args
    if get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    return annotation, optional


def _expected_type(annotation: Any) -> str:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "object"
    if get_origin(annotation) in (tuple, list):
        return "array"
    if annotation is bool:
        return "boolean"
    if annotation is int:
        return "integer"
    return "string"  # str, StrEnum, timedelta (Go duration), datetime (RFC 3339)


def _constraint(field: FieldInfo, kind: type) -> Any:
    for item in field.metadata:
        if isinstance(item, kind):
            return item
    return None


def _drift(model: type[BaseModel], schema: dict[str, Any], path: str) -> list[str]:
    found: list[str] = []
    fields = {field.alias or name: (name, field) for name, field in model.model_fields.items()}
    properties = schema.get("properties", {})
    if model is ScheduledJobSpec:  # kept in the schema only so that stored objects decode
        properties = {k: v for k, v in properties.items() if k not in REMOVED_FIELDS}
    for alias in sorted(set(fields) - set(properties)):
        found.append(f"{path}.{alias}: in {model.__name__} but not in the CRD")
    for alias in sorted(set(properties) - set(fields)):
        found.append(f"{path}.{alias}: in the CRD but not in {model.__name__}")
    required = sorted(alias for alias, (_, field) in fields.items() if field.is_required())
    if sorted(schema.get("required", [])) != required:
        found.append(f"{path}: required {schema.get('required', [])} != model {required}")
    for alias in sorted(set(fields) & set(properties)):
        name, field = fields[alias]
        found.extend(_field_drift(model, name, field, properties[alias], f"{path}.{alias}"))
    return found


def _field_drift(
    model: type[BaseModel], name: str, field: FieldInfo, prop: dict[str, Any], path: str
) -> list[str]:
    annotation, _ = _strip(field.annotation)
    found = []
    if prop.get("type") != _expected_type(annotation):
        found.append(f"{path}: type {prop.get('type')} != {_expected_type(annotation)}")
    enum = isinstance(annotation, type) and issubclass(annotation, StrEnum)
    if enum and prop.get("enum") != [member.value for member in annotation]:
        found.append(f"{path}: enum {prop.get('enum')} != {list(annotation)}")
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        found.extend(_drift(annotation, prop, path))
    if get_origin(annotation) is tuple:
        found.extend(_drift(get_args(annotation)[0], prop["items"], f"{path}[]"))
    for kind, attribute, key in (
        (annotated_types.Ge, "ge", "minimum"),
        (annotated_types.Le, "le", "maximum"),
        (annotated_types.MaxLen, "max_length", "maxLength"),
        (annotated_types.MinLen, "min_length", "minLength"),
    ):
        constraint = _constraint(field, kind)
        if constraint is not None and prop.get(key) != getattr(constraint, attribute):
            found.append(f"{path}: {key} {prop.get(key)} != {getattr(constraint, attribute)}")
    if model in SERVER_DEFAULTED and not field.is_required():
        found.extend(_default_drift(model, name, field, prop, path))
    return found


def _default_drift(
    model: type[BaseModel], name: str, field: FieldInfo, prop: dict[str, Any], path: str
) -> list[str]:
    base = MINIMAL.get(model, {})
    model_default = getattr(model.model_validate(base), name)
    if "default" not in prop:
        return [] if model_default is None else [f"{path}: no CRD default, model has one"]
    from_crd = getattr(model.model_validate({**base, field.alias: prop["default"]}), name)
    if from_crd != model_default:
        return [f"{path}: CRD default {prop['default']!r} != model default {model_default!r}"]
    return []


@pytest.mark.parametrize(
    ("crd", "part", "model"),
    [
        (scheduledjob_crd(), "spec", ScheduledJobSpec),
        (scheduledjob_crd(), "status", ScheduledJobStatus),
        (jobrun_crd(), "spec", JobRunSpec),
        (jobrun_crd(), "status", JobRunStatus),
    ],
    ids=["scheduledjob-spec", "scheduledjob-status", "jobrun-spec", "jobrun-status"],
)
def test_the_crd_schema_has_exactly_the_model_fields(
    crd: dict[str, Any], part: str, model: type[BaseModel]
) -> None:
    assert _drift(model, _schema(crd, part), part) == []


def test_the_drift_check_notices_a_missing_field() -> None:
    schema = _schema(scheduledjob_crd(), "spec")
    del schema["properties"]["lock"]["properties"]["keepAlive"]
    schema["properties"]["jitter"]["default"] = "1s"
    assert _drift(ScheduledJobSpec, schema, "spec") == [
        "spec.jitter: CRD default '1s' != model default datetime.timedelta(0)",
        "spec.lock.keepAlive: in LockSpec but not in the CRD",
    ]


@pytest.mark.parametrize("field", sorted(REMOVED_FIELDS))
def test_a_removed_field_stays_in_the_schema_without_a_default_and_is_refused(field: str) -> None:
    spec = _schema(scheduledjob_crd(), "spec")
    assert field not in ScheduledJobSpec.model_fields
    assert spec["properties"][field]["type"] == "string"
    assert "default" not in spec["properties"][field]
    (rule,) = [r for r in spec["x-kubernetes-validations"] if r.get("fieldPath") == f".{field}"]
    kept = KEPT_VALUES.get(field)
    allowed = f" || self.{field} == '{kept}'" if kept else ""
    assert rule["rule"] == f"!has(self.{field}){allowed}"
    assert rule["message"].startswith(f"spec.{field} was removed: ")
    assert f"self.{field}" in rule["messageExpression"]


@pytest.mark.parametrize("crd", all_crds(), ids=crd_file_name)
def test_the_crd_files_are_generated_from_the_models(crd: dict[str, Any]) -> None:
    path = REPO / "crds" / crd_file_name(crd)
    assert path.is_file(), REGENERATE
    assert path.read_text(encoding="utf-8") == render(crd), REGENERATE


def test_crds_holds_no_other_files() -> None:
    expected = {crd_file_name(crd) for crd in all_crds()}
    assert {p.name for p in (REPO / "crds").iterdir()} == expected
