"""Replica identity: what a replica writes as `holderIdentity`.

Unique per process incarnation and readable: the pod name (downward API `POD_NAME`) or the
hostname outside a pod, plus a short random suffix, so a restarted container never mistakes
its predecessor's grant for its own. It does not promise global uniqueness beyond the
32 random bits of the suffix.
"""

from __future__ import annotations

import os
import re
import secrets
import socket

POD_NAME_ENV = "POD_NAME"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_BASE = 200


def _base_name(pod_name: str | None) -> str:
    raw = pod_name or os.environ.get(POD_NAME_ENV) or socket.gethostname() or "replica"
    cleaned = _UNSAFE.sub("-", raw.strip()).strip("-.")
    return (cleaned or "replica")[:_MAX_BASE]


def make_identity(*, pod_name: str | None = None) -> str:
    """`<pod name or hostname>-<8 hex chars>`, new on every call."""
    return f"{_base_name(pod_name)}-{secrets.token_hex(4)}"


def identity_base(identity: str) -> str:
    """The readable part of an identity made by make_identity (the pod or host name)."""
    base, sep, suffix = identity.rpartition("-")
    if sep and len(suffix) == 8 and all(c in "0123456789abcdef" for c in suffix):
        return base
    return identity
