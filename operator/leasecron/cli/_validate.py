"""`leasecron validate FILE...`: check ScheduledJob manifests offline, with the same rules the
operator applies (`leasecron.models.specs.validate_resource`).

Owns reading the files (UTF-8 YAML, several documents per file, `-` for stdin, `kind: List`
expanded, directories like kubectl's `-f DIR` and `-R`), choosing which documents to check and
printing the verdicts. Every failure names the file and the reason, exit status 1: a file that
is empty, not UTF-8 or not YAML, a leasecron.dev document of a kind that does not exist, a
file named on the command line that holds no ScheduledJob. Documents of other API groups are
skipped and reported as such. Settings that a bucket ignores (`lock` on an every-replica job)
are warnings on stderr, exit status 0. Does not contact a cluster, so it cannot tell whether a
handler is registered or a namespace exists.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import click
import yaml

from leasecron.models.names import GROUP
from leasecron.models.specs import (
    KEPT_VALUES,
    MISSING,
    FieldProblem,
    SpecError,
    validate_resource,
)

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
    warnings: tuple[str, ...] = field(default=())

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
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out

    def warning_lines(self) -> list[str]:
        where = f"{self.kind or 'document'}/{self.name or f'#{self.document}'}"
        return [f"warning: {self.file}: {where}: {warning}" for warning in self.warnings]


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


KNOWN_KINDS = ("ScheduledJob", "JobRun")
MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")
# Settings that only coordinated buckets read: on an every-replica job they do nothing.
_COORDINATION_ONLY = {
    "lock": "every replica runs every tick without a lock (a lock here would let only one "
    "replica refresh its cache); remove it, or use bucket once-per-tick",
    "election": "only single-owner jobs elect; remove it",
}


def _group(document: Mapping[str, Any]) -> str:
    api_version = document.get("apiVersion")
    return api_version.split("/")[0] if isinstance(api_version, str) and "/" in api_version else ""


def _kind_problem(document: Mapping[str, Any]) -> FieldProblem | None:
    """Why a document that is meant for leasecron is of no kind leasecron has, or None."""
    kind = document.get("kind")
    if not isinstance(kind, str) or not kind:
        return FieldProblem(path="kind", value=MISSING, message="is required")
    if kind in KNOWN_KINDS:
        return None
    close = [k for k in KNOWN_KINDS if k.lower() == kind.lower().rstrip("s")]
    hint = f"; did you mean {close[0]}?" if close else ""
    message = f"is not a kind of {GROUP} (ScheduledJob or JobRun){hint}"
    return FieldProblem(path="kind", value=kind, message=message)


def _is_leasecron(document: Mapping[str, Any]) -> bool:
    """Meant for leasecron: its group is leasecron.dev, or its kind looks like one of ours."""
    kind = document.get("kind")
    looks_ours = isinstance(kind, str) and kind.lower().rstrip("s") in ("scheduledjob", "jobrun")
    return _group(document) == GROUP or looks_ours or not kind


def _warnings(document: Mapping[str, Any]) -> tuple[str, ...]:
    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        return ()
    kept = tuple(
        f"spec.{key} ({value}) is ignored: every once-per-tick job is claimed that way now; "
        "delete the field"
        for key, value in KEPT_VALUES.items()
        if spec.get(key) == value
    )
    if spec.get("bucket") != "every-replica":
        return kept
    return kept + tuple(
        f"spec.{key} is ignored on an every-replica job: {why}"
        for key, why in _COORDINATION_ONLY.items()
        if key in spec
    )


def check_text(file: str, text: str) -> list[Checked]:
    """The verdicts on every document of one file's text."""
    try:
        documents = list(_documents(text))
    except yaml.YAMLError as e:
        return [Checked(file=file, document=0, verdict="unreadable", error=f"not YAML: {e}")]
    if not documents:
        error = "empty: no YAML document in it"
        return [Checked(file=file, document=0, verdict="unreadable", error=error)]
    return [_check(file, index, document) for index, document in enumerate(documents, 1)]


def check_bytes(file: str, data: bytes) -> list[Checked]:
    """The verdicts on one file's raw content, which must be UTF-8."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        error = f"not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start} ({e.reason})"
        return [Checked(file=file, document=0, verdict="unreadable", error=error)]
    return check_text(file, text)


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
    if not _is_leasecron(document):
        return replace(base, verdict="skipped")
    wrong_kind = _kind_problem(document)
    if wrong_kind is not None:
        return replace(base, verdict="invalid", problems=(wrong_kind,))
    if document.get("kind") != "ScheduledJob":
        return replace(base, verdict="skipped")  # a JobRun: written by replicas, not by hand
    try:
        validate_resource(document)
    except SpecError as e:
        return replace(base, verdict="invalid", problems=e.problems)
    return replace(base, warnings=_warnings(document))


def _no_job(file: str, results: list[Checked]) -> Checked:
    found = ", ".join(f"{r.kind or 'document'}/{r.name or r.document}" for r in results)
    error = f"no ScheduledJob in this file (found {found})"
    return Checked(file=file, document=0, verdict="unreadable", error=error)


def _files(argument: str, *, recursive: bool) -> Iterator[tuple[str, bool]]:
    """(path, named) for an argument: the file itself (named on the command line), or the
    manifests of a directory, and with `recursive` of its subdirectories too."""
    path = Path(argument)
    if argument == "-" or not path.is_dir():
        yield argument, True
        return
    pattern = "**/*" if recursive else "*"
    for child in sorted(path.glob(pattern)):
        if child.is_file() and child.suffix in MANIFEST_SUFFIXES:
            yield str(child), False


def _check_file(file: str, *, named: bool) -> list[Checked]:
    if file == "-":
        results = check_bytes("<stdin>", sys.stdin.buffer.read())
    else:
        try:
            results = check_bytes(file, Path(file).read_bytes())
        except OSError as e:
            reason = e.strerror or str(e)
            return [Checked(file=file, document=0, verdict="unreadable", error=reason)]
    checked = [r for r in results if r.verdict in ("ok", "invalid") or r.kind == "JobRun"]
    if named and results and not checked and all(r.verdict == "skipped" for r in results):
        return [*results, _no_job(results[0].file, results)]
    return results


@click.command("validate")
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, allow_dash=True))
@click.option(
    "--recursive",
    "-R",
    is_flag=True,
    help="Also check the manifests in subdirectories of a directory argument.",
)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: one line per job or problem; json: a list of verdicts.",
)
def validate(files: tuple[str, ...], recursive: bool, output: str) -> None:
    """Check ScheduledJob manifests offline with the operator's rules.

    FILE may hold several YAML documents; use - for stdin. A directory stands for its *.yaml,
    *.yml and *.json files (with -R, also those of its subdirectories). Other API groups are
    skipped. Exits 1 when a ScheduledJob is invalid, a file is empty, not UTF-8 or not YAML, a
    leasecron.dev document has an unknown kind, or no ScheduledJob was found; 0 otherwise.
    Warnings (settings the job's bucket ignores) go to stderr.
    """
    results = [
        result
        for argument in files
        for path, named in _files(argument, recursive=recursive)
        for result in _check_file(path, named=named)
    ]
    if not any(r.kind == "ScheduledJob" for r in results) and not any(
        r.verdict in ("invalid", "unreadable") for r in results
    ):
        error = "no ScheduledJob found" + ("" if results else " (no manifest files)")
        results.append(
            Checked(file=", ".join(files), document=0, verdict="unreadable", error=error)
        )
    if output == "json":
        click.echo(json.dumps([result.as_json() for result in results], indent=2))
    else:
        for result in results:
            for line in result.text_lines():
                click.echo(line)
    for result in results:
        for line in result.warning_lines():
            click.echo(line, err=True)
    if any(result.verdict in ("invalid", "unreadable") for result in results):
        raise SystemExit(1)
