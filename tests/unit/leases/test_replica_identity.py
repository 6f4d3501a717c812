"""Replica identities: readable, unique per process incarnation."""

from __future__ import annotations

import socket

import pytest

from leasecron.models.identity import identity_base, make_identity


def test_identity_is_the_pod_name_plus_a_short_suffix() -> None:
    identity = make_identity(pod_name="billing-api-7d9f-x2")
    assert identity.startswith("billing-api-7d9f-x2-")
    assert identity_base(identity) == "billing-api-7d9f-x2"
    assert len(identity) == len("billing-api-7d9f-x2-") + 8


def test_two_incarnations_of_one_pod_get_different_identities() -> None:
    assert len({make_identity(pod_name="p") for _ in range(200)}) == 200


def test_pod_name_comes_from_the_downward_api_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAME", "from-env")
    assert identity_base(make_identity()) == "from-env"


def test_outside_a_pod_the_hostname_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    monkeypatch.setattr(socket, "gethostname", lambda: "laptop")
    assert identity_base(make_identity()) == "laptop"


def test_unsafe_characters_in_the_name_are_replaced() -> None:
    assert identity_base(make_identity(pod_name=" a b/c ")) == "a-b-c"
