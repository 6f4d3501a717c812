"""Validation problems as people read them: each names the field path and the offending value.

Owns the error type raised for invalid resources and the translation of pydantic's errors into
it. Does not decide what is valid; the models do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError
from pydantic.alias_generators import to_camel

from leasecron.models._fields import show


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING: Final[Any] = _Missing()
"""The value of a FieldProblem about a field that is absent."""


@dataclass(frozen=True, kw_only=True)
class FieldProblem:
    """One thing wrong with one field: `path` like `spec.lock.atLeastFor`, the `value` found
    there (MISSING when absent) and a `message` that completes a sentence about the value."""

    path: str
    value: Any
    message: str

    def __str__(self) -> str:
        if self.value is MISSING:
            return f"{self.path}: {self.message}"
        return f"{self.path}: {show(self.value)} {self.message}"


class SpecError(ValueError):
    """A resource that is not valid; `problems` lists everything found, not just the first."""

    def __init__(self, problems: Sequence[FieldProblem]) -> None:
        self.problems: tuple[FieldProblem, ...] = tuple(problems)
        super().__init__("; ".join(str(problem) for problem in self.problems) or "invalid")


_MESSAGES: dict[str, str] = {
    "missing": "is required",
    "extra_forbidden": "is not a known field (check its spelling)",
    "string_type": "must be a string",
    "bool_type": "must be true or false",
    "int_type": "must be an integer",
    "model_type": "must be a mapping",
    "model_attributes_type": "must be a mapping",
    "dict_type": "must be a mapping",
    "tuple_type": "must be a list",
    "list_type": "must be a list",
    "enum": "must be one of {expected}",
    "greater_than_equal": "must be at least {ge}",
    "less_than_equal": "must be at most {le}",
    "string_too_long": "must be at most {max_length} characters long",
    "string_too_short": "must not be empty",
    "datetime_type": "must be an RFC 3339 timestamp",
    "datetime_parsing": "must be an RFC 3339 timestamp, for example 2026-01-01T00:00:00Z",
    "datetime_from_date_parsing": "must be an RFC 3339 timestamp, for example 2026-01-01T00:00:00Z",
}


def problems_from(error: ValidationError, *, prefix: str) -> list[FieldProblem]:
    """Translate pydantic's errors for the object at `prefix` (e.g. `spec`)."""
    found: list[FieldProblem] = []
    for detail in error.errors(include_url=False):
        kind = detail["type"]
        parts = [str(part) for part in detail["loc"]]
        if kind != "extra_forbidden":
            # A default that fails validation is reported under its Python name.
            parts = [to_camel(part) if "_" in part else part for part in parts]
        path = ".".join([prefix, *parts]).strip(".")
        context = detail.get("ctx") or {}
        if kind in {"value_error", "assertion_error"} and "error" in context:
            message = str(context["error"])
        elif kind in _MESSAGES:
            message = _MESSAGES[kind].format(**context)
        else:
            text = detail["msg"]
            message = text[:1].lower() + text[1:]
        value = detail.get("input", MISSING)
        if kind == "missing" or value is None:
            value = MISSING
        found.append(FieldProblem(path=path, value=value, message=message))
    return found
