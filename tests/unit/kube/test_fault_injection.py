"""What an injected fault raises before anything is sent, and which plan a new Kube gets."""

from __future__ import annotations

import os
from pathlib import Path

import kubernetes.client
import pytest

from leasecron.kube import _injection
from leasecron.kube.clients import Kube
from leasecron.kube.errors import Conflict, KubeError, NotFound, OutcomeUnknown, Unavailable
from leasecron.testing.faults import ENV_VAR, Fault, FaultPlan, FaultRule


def inject(fault: Fault, *, write: bool = True) -> KubeError:
    with pytest.raises(KubeError) as caught:
        _injection.before_sending(
            FaultRule(fault),
            verb="update",
            resource="leases",
            name="a",
            write=write,
            url="https://127.0.0.1:1/apis/coordination.k8s.io/v1/namespaces/ns/leases/a",
            timeout=0.01,
        )
    return caught.value


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
    common = {"verb": "update", "resource": "leases", "name": "a"}

    assert type(_injection.reply_lost(rule, **common, write=True)) is OutcomeUnknown
    assert type(_injection.reply_lost(rule, **common, write=False)) is Unavailable


def test_a_kube_built_with_the_env_var_set_follows_that_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "faults.json"
    monkeypatch.setenv(ENV_VAR, os.fspath(path))

    kube = Kube(kubernetes.client.ApiClient(kubernetes.client.Configuration()))

    assert isinstance(kube.faults, FaultPlan) and kube.faults.path == path


def test_a_kube_built_without_the_env_var_has_an_empty_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)

    kube = Kube(kubernetes.client.ApiClient(kubernetes.client.Configuration()))

    assert kube.faults.path is None and kube.faults.rules == []
