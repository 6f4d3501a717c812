"""leasecron's own errors for everything that can go wrong talking to the API server.

`map_error` is the one place where HTTP statuses, `kubernetes` client exceptions, urllib3
transport errors and OSErrors become these classes; every caller does
`raise map_error(e) from e` (with `write=True` for a request that changes state). What this
module does not promise: that the list of statuses is exhaustive. Anything it does not
recognise becomes a plain `KubeError`, never a silent success.

For writes it separates "not sent" from "outcome unknown": a failure that proves the request
never left (connection refused, connect timeout, name resolution, an injected "fail", any HTTP
status reply) is a plain `Unavailable`; one that may have come after the request reached the
server (read timeout, connection reset or closed after sending) is `OutcomeUnknown`.
"""

from __future__ import annotations

import json
import socket
from typing import Any

import urllib3.exceptions
from kubernetes.client.exceptions import ApiException


class KubeError(Exception):
    """A request to the API server failed. `status` is the HTTP status, None without one."""

    def __init__(self, message: str, *, status: int | None = None, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, reason={self.reason!r})"


class NotFound(KubeError):
    """404: the object (or its namespace, or its API) does not exist."""


class Conflict(KubeError):
    """409 Conflict: the resourceVersion sent is stale; another writer got there first."""


class AlreadyExists(KubeError):
    """409 AlreadyExists: a create for a name that is taken."""


class Forbidden(KubeError):
    """401 or 403: the credentials are missing, wrong, or not allowed to do this."""


class Invalid(KubeError):
    """422 or 400: the API server rejected the request body or parameters."""


class Gone(KubeError):
    """410: a watch or list asked for a resourceVersion that is too old; relist."""


class Unavailable(KubeError):
    """The store cannot be reached or cannot answer now: connection refused or reset,
    timeouts, TLS failures mid-connection, 429 and 5xx. Worth retrying later."""


class OutcomeUnknown(Unavailable):
    """The request was (or may have been) sent and no reply came: a write may have landed.
    Read back before treating it as not written. Raised for writes only (POST, PUT, PATCH,
    DELETE): after a read timeout, a connection reset or closed after sending, a reply lost
    to an injected fault, or a caller that stopped waiting while the write was in flight."""


# Transport failures that prove the request never left this process.
_NOT_SENT: tuple[type[BaseException], ...] = (
    urllib3.exceptions.ConnectTimeoutError,  # includes NewConnectionError, NameResolutionError
    ConnectionRefusedError,
    socket.gaierror,
)


_TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (
    urllib3.exceptions.HTTPError,
    OSError,
    ConnectionError,
    TimeoutError,
)


def _status_details(body: object) -> tuple[str, str]:
    """(reason, message) from a Kubernetes `Status` body (bytes, str or dict); empty if none."""
    data: Any = body
    if isinstance(body, bytes | str):
        try:
            data = json.loads(body)
        except ValueError:
            text = body.decode(errors="replace") if isinstance(body, bytes) else body
            return "", text.strip()[:500]
    if not isinstance(data, dict):
        return "", ""
    return str(data.get("reason") or ""), str(data.get("message") or "")


def _from_status(status: int, reason: str, message: str) -> KubeError:
    text = message or reason or f"HTTP {status}"
    if status == 404:
        return NotFound(text, status=status, reason=reason or "NotFound")
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExists(text, status=status, reason=reason)
        return Conflict(text, status=status, reason=reason or "Conflict")
    if status in (401, 403):
        return Forbidden(text, status=status, reason=reason or "Forbidden")
    if status in (400, 422):
        return Invalid(text, status=status, reason=reason or "Invalid")
    if status == 410:
        return Gone(text, status=status, reason=reason or "Expired")
    if status == 429 or status >= 500:
        return Unavailable(text, status=status, reason=reason or "ServiceUnavailable")
    return KubeError(text, status=status, reason=reason)


def _root_cause(exc: BaseException) -> BaseException:
    """The transport error inside urllib3's MaxRetryError wrapper (itself when none)."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        return exc.reason
    return exc


def map_error(exc: BaseException, *, write: bool = False) -> KubeError:
    """The KubeError for `exc`: the one mapping from HTTP status and transport failures.

    Accepts `kubernetes` ApiExceptions (status 0 means the client never got a response),
    urllib3 errors, OSErrors and KubeErrors (returned unchanged). `write`: the failed request
    changes state, so a transport failure that may have come after sending is
    `OutcomeUnknown` rather than a plain `Unavailable`.
    """
    if isinstance(exc, KubeError):
        return exc
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        reason, message = _status_details(exc.body)
        if status == 0:
            text = message or str(exc.reason or exc)
            if write:
                return OutcomeUnknown(f"{text} (a write may have landed)", reason="NoResponse")
            return Unavailable(text, reason="NoResponse")
        return _from_status(status, reason, message or str(exc.reason or ""))
    if isinstance(exc, _TRANSPORT_ERRORS):
        cause = _root_cause(exc)
        text = f"{type(cause).__name__}: {cause}"
        if write and not isinstance(cause, _NOT_SENT):
            return OutcomeUnknown(f"{text} (a write may have landed)", reason="NoReply")
        return Unavailable(text, reason="Unreachable")
    return KubeError(f"{type(exc).__name__}: {exc}")


def status_error(status: int, body: bytes) -> KubeError:
    """The KubeError for a non-2xx response `status` with a raw `body`, via `map_error`."""
    return map_error(ApiException(status=status, reason=None, body=body.decode(errors="replace")))
