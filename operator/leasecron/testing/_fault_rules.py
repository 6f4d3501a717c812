"""Fault plans: rules saying which API requests a `Kube` fails, delays or cuts short.

Owns the pure side of fault injection: `Fault` (one validated rule), `FaultPlan` (the ordered
rules of one Kube, their hit counts, and an optional JSON file they are re-read from) and the
file format (a JSON list of Fault objects). Applying a fault to a request (sleeping, sending,
raising) is `_injection`'s job, as the Kube's transport wrapper. Public as
`leasecron.testing.faults`.

A request matches a rule when verb, resource (the plural as `_paths.describe` names it, with
"/status" for that subresource), and the optional name and namespace all match; "*" matches any
verb or resource. The first rule that fires wins. What this module does not promise: hit
counts of a file-backed plan are per process and start again when the file changes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, get_args

__all__ = ["Action", "Fault", "FaultPlan", "FaultRule", "load_faults"]

Action = Literal["lose_reply", "fail", "status", "delay", "hang"]
ACTIONS: tuple[str, ...] = get_args(Action)
VERBS = frozenset(
    {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection", "*"}
)
_FIELDS = ("verb", "resource", "name", "namespace", "action", "status", "seconds", "times", "after")

log = logging.getLogger("leasecron.faults")


def _check_int(field: str, value: object, *, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"Fault.{field} must be an integer >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"Fault.{field} must be an integer <= {high}, got {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Fault:
    """One rule: for requests matching verb/resource/name/namespace, do `action`.

    lose_reply: send, then discard the reply (a write lands; the caller gets OutcomeUnknown).
    fail: refuse without sending (Unavailable). status: answer `status` without sending.
    delay: wait `seconds`, then send. hang: send nothing, wait the request's timeout, then
    fail as a read timeout does. `after` lets the first N matches through; `times` limits how
    many requests the rule hits (None: all of them).
    """

    action: Action
    verb: str = "*"
    resource: str = "*"
    name: str | None = None
    namespace: str | None = None
    status: int = 503
    seconds: float = 0.0
    times: int | None = None
    after: int = 0

    def __post_init__(self) -> None:
        if self.verb not in VERBS:
            raise ValueError(f"Fault.verb must be one of {sorted(VERBS)}, got {self.verb!r}")
        for field in ("resource", "name", "namespace"):
            value = getattr(self, field)
            if (field == "resource" or value is not None) and (
                not isinstance(value, str) or not value
            ):
                raise ValueError(f"Fault.{field} must be a non-empty string, got {value!r}")
        if self.action not in ACTIONS:
            raise ValueError(f"Fault.action must be one of {list(ACTIONS)}, got {self.action!r}")
        _check_int("status", self.status, low=400, high=599)
        seconds = self.seconds
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"Fault.seconds must be a number >= 0, got {seconds!r}")
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"Fault.seconds must be a finite number >= 0, got {seconds!r}")
        if self.times is not None:
            _check_int("times", self.times, low=1)
        _check_int("after", self.after, low=0)

    @classmethod
    def from_dict(cls, data: object) -> Fault:
        """A Fault from its JSON form; ValueError naming an unknown or bad field."""
        if not isinstance(data, dict):
            raise ValueError(f"a fault must be a JSON object, got {data!r}")
        unknown = sorted(set(data) - set(_FIELDS))
        if unknown:
            raise ValueError(f"unknown Fault field(s) {unknown}; known: {list(_FIELDS)}")
        if "action" not in data:
            raise ValueError(f"Fault.action is required (one of {list(ACTIONS)}), got {data!r}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def matches(self, *, verb: str, resource: str, name: str | None, namespace: str | None) -> bool:
        """True when a request with these coordinates is one this rule is about."""
        return (
            self.verb in ("*", verb)
            and self.resource in ("*", resource)
            and (self.name is None or self.name == name)
            and (self.namespace is None or self.namespace == namespace)
        )


class FaultRule:
    """A Fault added to a plan, with its counts. `lifted` is set once it leaves the plan (a
    hanging request then stops waiting)."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.matched = 0
        self._hits = 0
        self.lifted = threading.Event()

    @property
    def hits(self) -> int:
        """Requests this rule has hit so far (in this process)."""
        return self._hits

    def _fire(self) -> bool:
        """Count one matching request; True when the fault applies to it."""
        self.matched += 1
        if self.matched <= self.fault.after:
            return False
        if self.fault.times is not None and self._hits >= self.fault.times:
            return False
        self._hits += 1
        return True

    def __repr__(self) -> str:
        return f"FaultRule({self.fault!r}, hits={self._hits})"


def load_faults(path: Path) -> list[Fault]:
    """The faults in a JSON file (a list of Fault objects); [] when the file is missing.
    ValueError naming the file and the problem when it is unreadable or invalid."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as e:
        raise ValueError(f"fault file {path}: cannot read it: {e}") from e
    try:
        data = json.loads(text) if text.strip() else []
        if not isinstance(data, list):
            raise ValueError(f"expected a JSON list of faults, got {type(data).__name__}")
        return [Fault.from_dict(item) for item in data]
    except ValueError as e:
        raise ValueError(f"fault file {path}: {e}") from e


class FaultPlan:
    """The ordered fault rules of one Kube; thread-safe. Rules added in process come first,
    then those of the plan's file (`FaultPlan(path=...)`), re-read whenever the file changes.
    A plan without rules or file costs one attribute check per request."""

    def __init__(self, *, path: Path | str | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        self._rules: list[FaultRule] = []
        self._file_rules: list[FaultRule] = []
        self._file_key: tuple[int, int, int] | None = None

    @property
    def rules(self) -> list[FaultRule]:
        """The rules now in force, in-process ones first."""
        with self._lock:
            self._reload()
            return [*self._rules, *self._file_rules]

    def add(self, fault: Fault) -> FaultRule:
        """Add `fault` after the existing rules; the returned rule counts its hits."""
        if not isinstance(fault, Fault):
            raise TypeError(f"FaultPlan.add takes a Fault, got {fault!r}")
        rule = FaultRule(fault)
        with self._lock:
            self._rules.append(rule)
        return rule

    def remove(self, rule: FaultRule) -> None:
        """Take `rule` out of the plan (no error when it is not in it)."""
        with self._lock:
            if rule in self._rules:
                self._rules.remove(rule)
        rule.lifted.set()

    def clear(self) -> None:
        """Remove every in-process rule (a file's rules stay while the file says so)."""
        with self._lock:
            rules, self._rules = self._rules, []
        for rule in rules:
            rule.lifted.set()

    @contextlib.contextmanager
    def injected(self, fault: Fault) -> Iterator[FaultRule]:
        """Add `fault` for the duration of a `with` block."""
        rule = self.add(fault)
        try:
            yield rule
        finally:
            self.remove(rule)

    def match(
        self, *, verb: str, resource: str, name: str | None, namespace: str | None
    ) -> FaultRule | None:
        """The rule that fires for this request (counting it), or None to send it normally."""
        if not self._rules and self.path is None:
            return None
        with self._lock:
            self._reload()
            for rule in (*self._rules, *self._file_rules):
                if (
                    rule.fault.matches(verb=verb, resource=resource, name=name, namespace=namespace)
                    and rule._fire()
                ):
                    return rule
        return None

    def write(
        self, path: Path | str | None = None, *, faults: Sequence[Fault] | None = None
    ) -> Path:
        """Write `faults` (default: this plan's in-process faults) as JSON to `path` (default:
        the plan's file), atomically: a reader sees the old file or the new one."""
        target = Path(path) if path is not None else self.path
        if target is None:
            raise ValueError("FaultPlan.write needs a path: this plan has no file")
        if faults is None:
            with self._lock:
                faults = [rule.fault for rule in self._rules]
        text = json.dumps([f.to_dict() for f in faults], indent=2)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            with os.fdopen(fd, "w") as f:
                f.write(text + "\n")
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        return target

    def _reload(self) -> None:
        """Re-read the plan's file when its identity, size or mtime changed (lock held)."""
        if self.path is None:
            return
        try:
            st = self.path.stat()
            key: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:
            key = None
        if key == self._file_key:
            return
        self._file_key = key
        try:
            faults = load_faults(self.path)
        except ValueError as e:
            log.error("ignoring the fault file (no faults injected from it): %s", e)
            faults = []
        old, self._file_rules = self._file_rules, [FaultRule(f) for f in faults]
        for rule in old:
            rule.lifted.set()
        if faults:
            log.warning("fault file %s: %d fault(s) in force", self.path, len(faults))
