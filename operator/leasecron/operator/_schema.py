"""Building blocks of structural OpenAPI v3 schemas for CRDs: typed properties, CEL rules,
printer columns and the CRD envelope.

Owns the shape Kubernetes expects of these pieces; which fields a resource has is for `crds`.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel

from leasecron.models import _fields as f
from leasecron.models.names import GROUP, VERSION

Schema = dict[str, Any]
ENUM_MAX_LENGTH = 32


def described(model: type[BaseModel], alias: str, schema: Schema) -> tuple[str, Schema]:
    """A property named by its wire name, with the model field's description."""
    for field in model.model_fields.values():
        if field.alias == alias:
            return alias, ({"description": field.description} if field.description else {}) | schema
    raise KeyError(f"{model.__name__} has no field {alias!r}")


def string(**extra: Any) -> Schema:
    return {"type": "string", **{_key(k): v for k, v in extra.items()}}


def _key(name: str) -> str:
    return {"max_length": "maxLength", "min_length": "minLength", "fmt": "format"}.get(name, name)


def enum(kind: type[StrEnum], **extra: Any) -> Schema:
    return string(enum=[member.value for member in kind], max_length=ENUM_MAX_LENGTH, **extra)


def duration(**extra: Any) -> Schema:
    return string(pattern=f.DURATION_PATTERN, max_length=f.DURATION_MAX_LENGTH, **extra)


def timestamp() -> Schema:
    return string(fmt="date-time")


def integer(**extra: Any) -> Schema:
    return {"type": "integer", "format": "int64", **extra}


def object_schema(
    model: type[BaseModel],
    properties: dict[str, Schema],
    *,
    required: Sequence[str] = (),
    rules: Sequence[Schema] = (),
    **extra: Any,
) -> Schema:
    schema: Schema = {
        "type": "object",
        "properties": dict(described(model, name, prop) for name, prop in properties.items()),
    }
    if required:
        schema["required"] = list(required)
    if rules:
        schema["x-kubernetes-validations"] = list(rules)
    return schema | extra


def rule(
    expression: str,
    message: str,
    *,
    field_path: str | None = None,
    message_expression: str | None = None,
) -> Schema:
    """A CEL rule (x-kubernetes-validations entry), optionally pointing at one field. A
    `message_expression` (CEL building the message from the values) wins over `message`, which
    the API server still shows if the expression fails."""
    out: Schema = {"rule": expression, "message": message}
    if message_expression:
        out["messageExpression"] = message_expression
    if field_path:
        out["fieldPath"] = field_path
    return out


def root(description: str, spec: Schema, status: Schema) -> Schema:
    """The top-level schema of a resource with spec and status."""
    return {
        "type": "object",
        "description": description,
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "required": ["spec"],
    }


def column(name: str, path: str, kind: str = "string", description: str = "") -> Schema:
    out: Schema = {"name": name, "type": kind, "jsonPath": path}
    if description:
        out["description"] = description
    return out


def crd(
    *, kind: str, plural: str, short: str, schema: Schema, columns: list[Schema], status: bool
) -> Schema:
    """A namespaced CRD with one served, stored version and the `leasecron` category."""
    version: Schema = {"name": VERSION, "served": True, "storage": True}
    version["schema"] = {"openAPIV3Schema": schema}
    if status:
        version["subresources"] = {"status": {}}
    version["additionalPrinterColumns"] = columns
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {
                "app.kubernetes.io/name": "leasecron",
                "app.kubernetes.io/part-of": "leasecron",
            },
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": kind.lower(),
                "shortNames": [short],
                "categories": ["leasecron"],
            },
            "versions": [version],
        },
    }
