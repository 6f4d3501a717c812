"""The Lease record: a plain value read from, and written back to, a coordination.k8s.io/v1
Lease exactly as client-go's LeaseLock uses the object.

Owns `LeaseRecord`, `parse_lease()` (raw dict -> record, never raises) and `lease_body()`
(record -> the full Lease dict to create or PUT). Parsing is defensive because anyone with RBAC
on Leases can write anything there: corrupt fields become safe values and a line in
`problems`, and the decisions built on a record treat unknown expiry conservatively.

It does not judge expiry (that needs a local monotonic clock: see `decisions`), and it does not
talk to the API server.
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from leasecron.models.names import ANNOTATION_TICK, format_tick, parse_tick

API_VERSION = "coordination.k8s.io/v1"
KIND = "Lease"
MAX_SANE_DURATION_S = 7 * 24 * 3600
"""A leaseDurationSeconds above this (a week) is treated as corrupt: it would block a job
for longer than any schedule leasecron validates, so the decision falls back to its own
configured duration instead."""
MAX_TRANSITIONS = 2**31 - 1
RELEASED_DURATION_S = 1
"""What client-go writes on release (ReleaseOnCancel): empty holder, one second."""

_OUR_SPEC_KEYS = (
    "holderIdentity",
    "leaseDurationSeconds",
    "acquireTime",
    "renewTime",
    "leaseTransitions",
)
_PRINTABLE = re.compile(r"^[\x20-\x7e\u00a0-\uffff]*$")
_MICRO_FORMATS = ("%Y-%m-%dT%H:%M:%S.%f%z", "%Y-%m-%dT%H:%M:%S%z")


@dataclass(frozen=True, kw_only=True)
class LeaseRecord:
    """What a Lease says, in client-go's LeaderElectionRecord terms plus leasecron's tick.

    `holder` is "" when the Lease is free. `lease_duration_s` is None when unknown (missing
    or corrupt); decisions then use their own configured duration. Times are aware UTC
    datetimes or None. `problems` lists, in words, anything found corrupt while parsing.
    """

    name: str = ""
    namespace: str = ""
    holder: str = ""
    lease_duration_s: int | None = None
    acquire_time: datetime | None = None
    renew_time: datetime | None = None
    transitions: int = 0
    tick: datetime | None = None
    resource_version: str | None = None
    created: datetime | None = None
    """metadata.creationTimestamp: when this Lease object (by its uid) was made, by the API
    server's clock, in whole seconds."""
    problems: tuple[str, ...] = ()

    @property
    def free(self) -> bool:
        return self.holder == ""


def format_micro_time(value: datetime) -> str:
    """metav1.MicroTime as client-go serialises it: `2006-01-02T15:04:05.000000Z`."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(text: str) -> datetime:
    """MicroTime or plain RFC 3339 (with `Z` or an offset); raises ValueError otherwise."""
    raw = text.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    for fmt in _MICRO_FORMATS:
        try:
            return datetime.strptime(raw, fmt).astimezone(UTC)
        except ValueError:
            continue
    raise ValueError(f"{text!r} is not an RFC 3339 time")


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _parse_holder(spec: Mapping[str, Any], problems: list[str]) -> str:
    raw = spec.get("holderIdentity")
    if raw is None:
        return ""
    if not isinstance(raw, str):
        problems.append(f"holderIdentity {_short(raw)} is not a string")
        return f"<invalid:{type(raw).__name__}>"
    if len(raw) > 1024 or not _PRINTABLE.match(raw):
        problems.append(f"holderIdentity {_short(raw)} looks corrupt")
    return raw


def _parse_duration(spec: Mapping[str, Any], holder: str, problems: list[str]) -> int | None:
    raw = spec.get("leaseDurationSeconds")
    if raw is None:
        if holder:
            problems.append("leaseDurationSeconds is missing although the Lease has a holder")
        return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        problems.append(f"leaseDurationSeconds {_short(raw)} is not an integer")
        return None
    if raw <= 0 or raw > MAX_SANE_DURATION_S:
        problems.append(
            f"leaseDurationSeconds {raw} is outside 1..{MAX_SANE_DURATION_S}; treated as unknown"
        )
        return None
    return raw


def _parse_time(spec: Mapping[str, Any], key: str, problems: list[str]) -> datetime | None:
    raw = spec.get(key)
    if raw is None:
        return None
    if isinstance(raw, datetime):
        return raw if raw.tzinfo else raw.replace(tzinfo=UTC)
    if isinstance(raw, str):
        try:
            return parse_micro_time(raw)
        except ValueError:
            pass
    problems.append(f"{key} {_short(raw)} is not a time")
    return None


def _parse_transitions(spec: Mapping[str, Any], problems: list[str]) -> int:
    raw = spec.get("leaseTransitions")
    if raw is None:
        return 0
    if isinstance(raw, bool) or not isinstance(raw, int):
        problems.append(f"leaseTransitions {_short(raw)} is not an integer; read as 0")
        return 0
    if raw < 0 or raw > MAX_TRANSITIONS:
        problems.append(f"leaseTransitions {raw} is out of range; read as 0")
        return 0
    return raw


def _parse_tick(annotations: Mapping[str, Any], problems: list[str]) -> datetime | None:
    raw = annotations.get(ANNOTATION_TICK)
    if raw is None:
        return None
    if isinstance(raw, str):
        try:
            return parse_tick(raw)
        except ValueError:
            pass
    problems.append(f"annotation {ANNOTATION_TICK} {_short(raw)} is not a tick")
    return None


def parse_lease(obj: object) -> LeaseRecord:
    """Read a raw Lease dict. Never raises: corrupt fields become safe values + problems."""
    problems: list[str] = []
    if not isinstance(obj, Mapping):
        return LeaseRecord(problems=(f"the object is a {type(obj).__name__}, not a Lease",))
    metadata = _mapping(obj.get("metadata"))
    if "metadata" in obj and not isinstance(obj.get("metadata"), Mapping | None):
        problems.append(f"metadata {_short(obj.get('metadata'))} is not an object")
    if "spec" in obj and not isinstance(obj.get("spec"), Mapping | None):
        problems.append(f"spec {_short(obj.get('spec'))} is not an object")
    spec = _mapping(obj.get("spec"))
    name = metadata.get("name")
    namespace = metadata.get("namespace")
    rv = metadata.get("resourceVersion")
    holder = _parse_holder(spec, problems)
    return LeaseRecord(
        name=name if isinstance(name, str) else "",
        namespace=namespace if isinstance(namespace, str) else "",
        holder=holder,
        lease_duration_s=_parse_duration(spec, holder, problems),
        acquire_time=_parse_time(spec, "acquireTime", problems),
        renew_time=_parse_time(spec, "renewTime", problems),
        transitions=_parse_transitions(spec, problems),
        tick=_parse_tick(_mapping(metadata.get("annotations")), problems),
        resource_version=rv if isinstance(rv, str) and rv else None,
        created=_parse_time(metadata, "creationTimestamp", []),
        problems=tuple(problems),
    )


def _spec(record: LeaseRecord, base_spec: Mapping[str, Any]) -> dict[str, Any]:
    spec = {k: v for k, v in base_spec.items() if k not in _OUR_SPEC_KEYS}
    spec["holderIdentity"] = record.holder
    if record.lease_duration_s is not None:
        spec["leaseDurationSeconds"] = record.lease_duration_s
    if record.acquire_time is not None:
        spec["acquireTime"] = format_micro_time(record.acquire_time)
    if record.renew_time is not None:
        spec["renewTime"] = format_micro_time(record.renew_time)
    spec["leaseTransitions"] = record.transitions
    return spec


def _owner_references(
    base: list[Any], owner_reference: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    refs = [dict(ref) for ref in base if isinstance(ref, Mapping)]
    if owner_reference is not None:
        uid = owner_reference.get("uid")
        if not any(ref.get("uid") == uid for ref in refs):
            refs.append(dict(owner_reference))
    return refs


def lease_body(
    record: LeaseRecord,
    *,
    base: Mapping[str, Any] | None = None,
    labels: Mapping[str, str] | None = None,
    owner_reference: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The full Lease dict for `record`, to create (no resourceVersion) or PUT (with it).

    Labels, annotations, owner references and spec fields of `base` that leasecron does not
    own are kept; `labels` are merged over them. The tick annotation follows `record.tick`
    (set, or removed when None). Times are written as client-go MicroTime.
    """
    base_meta = _mapping(base.get("metadata")) if base else {}
    base_spec = _mapping(base.get("spec")) if base else {}
    merged_labels = {
        str(k): str(v) for k, v in _mapping(base_meta.get("labels")).items() if v is not None
    }
    merged_labels.update(labels or {})
    annotations = {
        str(k): str(v) for k, v in _mapping(base_meta.get("annotations")).items() if v is not None
    }
    annotations.pop(ANNOTATION_TICK, None)
    if record.tick is not None:
        annotations[ANNOTATION_TICK] = format_tick(record.tick)
    metadata: dict[str, Any] = {"name": record.name, "namespace": record.namespace}
    if merged_labels:
        metadata["labels"] = merged_labels
    if annotations:
        metadata["annotations"] = annotations
    base_refs = base_meta.get("ownerReferences")
    refs = _owner_references(base_refs if isinstance(base_refs, list) else [], owner_reference)
    if refs:
        metadata["ownerReferences"] = refs
    if record.resource_version is not None:
        metadata["resourceVersion"] = record.resource_version
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": _spec(record, base_spec),
    }


def whole_seconds(seconds: float) -> int:
    """A duration as leaseDurationSeconds: rounded up, at least 1."""
    return max(1, math.ceil(seconds - 1e-9))


def lease_annotations(obj: object) -> Mapping[str, object]:
    """metadata.annotations of a raw object ({} when missing or not a mapping)."""
    metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def with_annotations(obj: Mapping[str, Any], changes: Mapping[str, str | None]) -> dict[str, Any]:
    """A copy of the raw object `obj` with annotations set (or removed, for None)."""
    result = copy.deepcopy(dict(obj))
    metadata = result.setdefault("metadata", {})
    annotations = dict(_mapping(metadata.get("annotations")))
    for key, value in changes.items():
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
    metadata["annotations"] = annotations
    return result
