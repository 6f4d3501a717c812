"""`leasecron validate FILE...`: check ScheduledJob manifests offline, with the same rules the
operator applies (`leasecron.models.specs.validate_resource`).

Owns reading the YAML (several documents per file, `-` for stdin, `kind: List` expanded),
choosing which documents to check and printing the verdicts. Documents of other kinds are
skipped and reported as such. Does not contact a cluster, so it cannot tell whether a handler
is registered or a namespace exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TextIO

import click
import yaml

from leasecron.models.names import GROUP
from leasecron.models.specs import MISSING, FieldProblem, SpecError, validate_resource

Verdict = Literal["ok", "invalid", "skipped", "unreadable"]


@dataclass(frozen=True, kw_only=True)
class Checked:
    """The verdict on one document of one file."""

    file: str
    document: int
    verdict: Verdict
    kind: str = ""
    namespace: str = ""
    name: str = ""
    problems: tuple[FieldProblem, ...] = field(default=())
    error: str = ""

    @property
    def label(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def text_lines(self) -> list[str]:
        where = f"{self.kind or 'document'}/{self.name or f'#{self.document}'}"
        if self.verdict == "ok":
            return [f"ok {self.file}: {self.label}"]
        if self.verdict == "skipped":
            return [f"skip {self.file}: {where} (not a {GROUP} ScheduledJob)"]
        if self.verdict == "unreadable":
            return [f"{self.file}: {self.error}"]
        return [f"{self.file}: {where}: {problem}" for problem in self.problems]

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "file": self.file,
            "document": self.document,
            "verdict": self.verdict,
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "problems": [_problem_json(problem) for problem in self.problems],
        }
        if self.error:
            out["error"] = self.error
        return out


def _problem_json(problem: FieldProblem) -> dict[str, Any]:
    out: dict[str, Any] = {"path": problem.path, "message": problem.message}
    if problem.value is not MISSING:
        out["value"] = json.loads(json.dumps(problem.value, default=str))
    out["text"] = str(problem)
    return out


def _documents(text: str) -> Iterator[object]:
    """Every document, with the items of a `kind: List` in its place."""
    for document in yaml.safe_load_all(text):
        if isinstance(document, Mapping) and document.get("kind") == "List":
            yield from document.get("items") or []
        elif document is not None:
            yield document


def _is_scheduledjob(document: Mapping[str, Any]) -> bool:
    api_version = document.get("apiVersion")
    return document.get("kind") == "ScheduledJob" and (
        not isinstance(api_version, str) or api_version.split("/")[0] == GROUP
    )


def check_text(file: str, text: str) -> list[Checked]:
    """The verdicts on every document of one file's text."""
    try:
        documents = list(_documents(text))
    except yaml.YAMLError as e:
        return [Checked(file=file, document=0, verdict="unreadable", error=f"not YAML: {e}")]
    return [_check(file, index, document) for index, document in enumerate(documents, 1)]


def _check(file: str, index: int, document: object) -> Checked:
    if not isinstance(document, Mapping):
        problem = FieldProblem(path="(document)", value=document, message="must be a mapping")
        return Checked(file=file, document=index, verdict="invalid", problems=(problem,))
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    base = Checked(
        file=file,
        document=index,
        verdict="ok",
        kind=str(document.get("kind") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
    )
    if not _is_scheduledjob(document):
        return replace(base, verdict="skipped")
    try:
        validate_resource(document)
    except SpecError as e:
        return replace(base, verdict="invalid", problems=e.problems)
    return base


@click.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.File("r", encoding="utf-8"))
@click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: one line per job or problem; json: a list of verdicts.",
)
def validate(files: tuple[TextIO, ...], output: str) -> None:
    """Check ScheduledJob manifests offline with the operator's rules.

    FILE may hold several YAML documents; use - for stdin. Other kinds are skipped. Exits 1
    when any ScheduledJob is invalid or a file is not YAML, 0 otherwise.
    """
    results = [result for stream in files for result in check_text(stream.name, stream.read())]
    if output == "json":
        click.echo(json.dumps([result.as_json() for result in results], indent=2))
    else:
        for result in results:
            for line in result.text_lines():
                click.echo(line)
    if any(result.verdict in ("invalid", "unreadable") for result in results):
        raise SystemExit(1)
