"""What an injected fault raises, how a Kube's transport wrappers see its requests, and which
Kubes inject faults at all (only those a plan was installed on)."""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import kubernetes.client
import pytest
import urllib3

from leasecron.kube.clients import Kube
from leasecron.kube.errors import Conflict, KubeError, NotFound, OutcomeUnknown, Unavailable
from leasecron.kube.transports import Request, Send
from leasecron.testing import _injection
from leasecron.testing.faults import (
    ENV_VAR,
    Fault,
    FaultPlan,
    FaultRule,
    fault_plan,
    install_from_env,
)

LEASE = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/a"


def request(*, write: bool = True) -> Request:
    return Request(
        method="PUT" if write else "GET",
        url=f"https://127.0.0.1:1{LEASE}",
        verb="update" if write else "get",
        resource="leases",
        name="a",
        namespace="ns",
        write=write,
        stream=False,
        timeout=0.01,
    )


def inject(fault: Fault, *, write: bool = True) -> KubeError:
    with pytest.raises(KubeError) as caught:
        _injection.before_sending(FaultRule(fault), request(write=write))
    return caught.value


class Server:
    """Stands in for the connection pool of a Kube: answers every request with `status`."""

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.sent: list[tuple[str, str]] = []
        self.closed = 0

    def request(self, method: str, url: str, **_: Any) -> urllib3.BaseHTTPResponse:
        self.sent.append((method, url))
        body = b'{"kind":"Lease"}' if self.status < 300 else b'{"kind":"Status","code":503}'
        response = urllib3.HTTPResponse(
            body=io.BytesIO(body), status=self.status, preload_content=True
        )
        original = response.close

        def close() -> None:
            self.closed += 1
            original()

        response.close = close  # type: ignore[method-assign]
        return response


def offline_kube(server: Server) -> Kube:
    kube = Kube(kubernetes.client.ApiClient(kubernetes.client.Configuration()), max_workers=1)
    kube.api_client.rest_client.pool_manager = server  # type: ignore[assignment]
    return kube


def fault_file(path: Path, *faults: Fault) -> Path:
    return FaultPlan().write(path, faults=list(faults))


@pytest.mark.parametrize(
    ("status", "expected"),
    [(503, Unavailable), (429, Unavailable), (500, Unavailable), (409, Conflict), (404, NotFound)],
)
def test_an_injected_status_raises_what_the_real_status_maps_to(
    status: int, expected: type[KubeError]
) -> None:
    error = inject(Fault(action="status", status=status))

    assert type(error) is expected
    assert error.status == status
    assert "(injected fault)" in error.message


def test_an_injected_failure_is_plain_unavailable_even_for_a_write() -> None:
    assert type(inject(Fault(action="fail"))) is Unavailable


def test_a_hang_ends_as_a_read_timeout_whose_outcome_is_unknown_for_a_write() -> None:
    error = inject(Fault(action="hang"))

    assert type(error) is OutcomeUnknown
    assert "Read timed out" in error.message


def test_a_hang_ends_as_plain_unavailable_for_a_read() -> None:
    assert type(inject(Fault(action="hang"), write=False)) is Unavailable


def test_a_lost_reply_is_an_unknown_outcome_only_for_a_write() -> None:
    rule = FaultRule(Fault(action="lose_reply"))

    assert type(_injection.reply_lost(rule, request(write=True))) is OutcomeUnknown
    assert type(_injection.reply_lost(rule, request(write=False))) is Unavailable


def test_a_kube_built_normally_injects_nothing_even_with_the_env_var_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fault_file(tmp_path / "faults.json", Fault(action="fail"))
    monkeypatch.setenv(ENV_VAR, os.fspath(path))
    server = Server()

    kube = offline_kube(server)

    assert kube.transport_wrappers == ()
    assert kube.request_sync("GET", LEASE) == {"kind": "Lease"}
    assert len(server.sent) == 1


def test_install_from_env_makes_a_kube_follow_the_file_the_env_var_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = fault_file(tmp_path / "faults.json", Fault(verb="get", action="fail", times=1))
    monkeypatch.setenv(ENV_VAR, os.fspath(path))
    server = Server()
    kube = offline_kube(server)

    plan = install_from_env(kube)

    assert plan is not None and plan.path == path
    with pytest.raises(Unavailable, match="injected fault"):
        kube.request_sync("GET", LEASE)
    assert server.sent == []  # refused before sending
    assert kube.request_sync("GET", LEASE) == {"kind": "Lease"}  # times=1: spent
    fault_file(path, Fault(verb="get", action="status", status=429))
    with pytest.raises(Unavailable, match="injected fault"):
        kube.request_sync("GET", LEASE)  # the file changed: its new rule is in force
    assert install_from_env(kube) is plan  # installed once


def test_install_from_env_without_the_env_var_installs_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    kube = offline_kube(Server())

    assert install_from_env(kube) is None
    assert kube.transport_wrappers == ()


def test_a_fault_plan_is_installed_once_and_a_different_file_is_refused(tmp_path: Path) -> None:
    kube = offline_kube(Server())

    plan = fault_plan(kube)

    assert fault_plan(kube) is plan and len(kube.transport_wrappers) == 1
    with pytest.raises(ValueError, match="follows no file"):
        fault_plan(kube, path=tmp_path / "faults.json")


def test_a_lost_reply_is_sent_then_discarded_through_the_plan(tmp_path: Path) -> None:
    server = Server()
    kube = offline_kube(server)
    fault_plan(kube).add(Fault(verb="update", action="lose_reply", times=1))

    with pytest.raises(OutcomeUnknown, match="reply lost"):
        kube.request_sync("PUT", LEASE, body={"metadata": {"name": "a"}})

    assert [method for method, _ in server.sent] == ["PUT"] and server.closed == 1
    assert kube.request_sync("PUT", LEASE, body={}) == {"kind": "Lease"}


def test_wrappers_see_a_described_request_the_last_installed_first() -> None:
    server = Server()
    kube = offline_kube(server)
    seen: list[tuple[str, Request]] = []

    def wrapper(label: str) -> Any:
        def wrap(request: Request, send: Send) -> urllib3.BaseHTTPResponse:
            seen.append((label, request))
            return send()

        return wrap

    kube.wrap_transport(wrapper("first"))
    kube.wrap_transport(wrapper("second"))
    kube.request_sync("POST", "/api/v1/namespaces/ns/configmaps", body={"metadata": {"name": "c"}})

    assert [label for label, _ in seen] == ["second", "first"]
    described = seen[0][1]
    assert (described.verb, described.resource) == ("create", "configmaps")
    assert (described.namespace, described.name, described.write) == ("ns", "c", True)
    assert described.timeout == kube.request_timeout and not described.stream


def test_a_status_the_server_answers_is_mapped_after_the_wrappers_return() -> None:
    kube = offline_kube(Server(status=503))
    statuses: list[int] = []

    def record(request: Request, send: Send) -> urllib3.BaseHTTPResponse:
        response = send()
        statuses.append(response.status)
        return response

    kube.wrap_transport(record)

    with pytest.raises(Unavailable):
        kube.request_sync("GET", LEASE)
    assert statuses == [503]
