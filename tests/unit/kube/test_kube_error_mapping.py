"""map_error: every HTTP status and transport failure lands on the right leasecron error."""

from __future__ import annotations

import json

import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from leasecron.kube.errors import (
    AlreadyExists,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    KubeError,
    NotFound,
    OutcomeUnknown,
    Unavailable,
    map_error,
    status_error,
)


def _status_body(code: int, reason: str, message: str = "the message") -> str:
    return json.dumps(
        {"kind": "Status", "status": "Failure", "code": code, "reason": reason, "message": message}
    )


@pytest.mark.parametrize(
    ("status", "reason", "expected"),
    [
        (404, "NotFound", NotFound),
        (409, "Conflict", Conflict),
        (409, "AlreadyExists", AlreadyExists),
        (401, "Unauthorized", Forbidden),
        (403, "Forbidden", Forbidden),
        (422, "Invalid", Invalid),
        (400, "BadRequest", Invalid),
        (410, "Expired", Gone),
        (429, "TooManyRequests", Unavailable),
        (500, "InternalError", Unavailable),
        (503, "ServiceUnavailable", Unavailable),
        (504, "Timeout", Unavailable),
    ],
)
def test_an_http_status_maps_to_its_error_class(
    status: int, reason: str, expected: type[KubeError]
) -> None:
    error = map_error(ApiException(status=status, body=_status_body(status, reason)))

    assert type(error) is expected
    assert error.status == status
    assert error.reason == reason
    assert error.message == "the message"


def test_a_409_without_a_reason_is_a_conflict_not_already_exists() -> None:
    error = map_error(ApiException(status=409, reason="Conflict"))

    assert type(error) is Conflict


def test_an_unrecognised_status_is_a_plain_kube_error() -> None:
    error = map_error(ApiException(status=405, body=_status_body(405, "MethodNotAllowed")))

    assert type(error) is KubeError
    assert error.status == 405


def test_a_body_that_is_not_json_becomes_the_message() -> None:
    error = map_error(ApiException(status=502, body="<html>bad gateway</html>"))

    assert type(error) is Unavailable
    assert "bad gateway" in error.message


def test_a_client_exception_without_a_response_means_unavailable() -> None:
    error = map_error(ApiException(status=0, reason="SSLError\nEOF occurred"))

    assert type(error) is Unavailable
    assert error.status is None


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connection refused"),
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError("timed out"),
        urllib3.exceptions.MaxRetryError(None, "/api", reason=None),  # type: ignore[arg-type]
        urllib3.exceptions.ProtocolError("Connection aborted."),
        urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out."),  # type: ignore[arg-type]
        urllib3.exceptions.SSLError("EOF occurred in violation of protocol"),
    ],
)
def test_transport_failures_mean_the_store_is_unavailable(exc: BaseException) -> None:
    error = map_error(exc)

    assert type(error) is Unavailable
    assert error.status is None


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError("timed out"),
        urllib3.exceptions.ProtocolError("Connection aborted."),
        urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out."),  # type: ignore[arg-type]
        urllib3.exceptions.MaxRetryError(
            None,  # type: ignore[arg-type]
            "/api",
            reason=urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out."),  # type: ignore[arg-type]
        ),
        urllib3.exceptions.SSLError("EOF occurred in violation of protocol"),
        ApiException(status=0, reason="no response"),
    ],
)
def test_a_write_that_may_have_reached_the_server_has_an_unknown_outcome(
    exc: BaseException,
) -> None:
    error = map_error(exc, write=True)

    assert type(error) is OutcomeUnknown
    assert isinstance(error, Unavailable)  # still "the store is unavailable" to old callers
    assert "may have landed" in error.message


@pytest.mark.parametrize(
    "exc",
    [
        ConnectionRefusedError(111, "Connection refused"),
        urllib3.exceptions.NewConnectionError(None, "Connection refused"),  # type: ignore[arg-type]
        urllib3.exceptions.ConnectTimeoutError(None, "/api", "connect timed out"),
        urllib3.exceptions.MaxRetryError(
            None,  # type: ignore[arg-type]
            "/api",
            reason=urllib3.exceptions.NewConnectionError(None, "Connection refused"),  # type: ignore[arg-type]
        ),
        urllib3.exceptions.NameResolutionError("nowhere.invalid", None, OSError("no name")),  # type: ignore[arg-type]
    ],
)
def test_a_write_that_provably_never_left_is_plain_unavailable(exc: BaseException) -> None:
    error = map_error(exc, write=True)

    assert type(error) is Unavailable


def test_a_status_reply_to_a_write_is_never_an_unknown_outcome() -> None:
    error = map_error(
        ApiException(status=503, body=_status_body(503, "ServiceUnavailable")), write=True
    )

    assert type(error) is Unavailable


def test_a_kube_error_is_returned_unchanged() -> None:
    original = Conflict("stale", status=409, reason="Conflict")

    assert map_error(original) is original


def test_anything_else_is_a_plain_kube_error_naming_the_original_type() -> None:
    error = map_error(RuntimeError("boom"))

    assert type(error) is KubeError
    assert "RuntimeError" in error.message


def test_status_error_reads_the_reason_from_a_raw_status_body() -> None:
    body = _status_body(409, "AlreadyExists", 'leases "x" already exists').encode()

    error = status_error(409, body)

    assert type(error) is AlreadyExists
    assert error.message == 'leases "x" already exists'
