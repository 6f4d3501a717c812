"""Connection-level faults: a Kube reaching the real API server through a Toxiproxy proxy that
is partitioned, healed, blackholed or reset."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from leasecron.kube.clients import Kube
from leasecron.kube.errors import OutcomeUnknown, Unavailable
from leasecron.kube.leases import LeaseStore
from leasecron.testing import ClusterAccess, Proxy, Toxiproxy, kubeconfig_via

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def toxiproxy() -> Iterator[Toxiproxy]:
    with Toxiproxy() as server:
        yield server


@pytest.fixture
def proxy(toxiproxy: Toxiproxy, controlplane: ClusterAccess) -> Iterator[Proxy]:
    server = urlsplit(controlplane.server)
    if server.hostname != "127.0.0.1" or server.port is None:
        pytest.skip(f"Toxiproxy targets loopback only; the API server is {controlplane.server}")
    proxy = toxiproxy.proxy(f"apiserver-{secrets.token_hex(3)}", server.port)
    yield proxy
    toxiproxy.api("DELETE", f"/proxies/{proxy.name}")


@pytest.fixture
def proxied(proxy: Proxy, controlplane: ClusterAccess, tmp_path: Path) -> Iterator[LeaseStore]:
    """A LeaseStore whose Kube reaches the API server only through `proxy`."""
    kubeconfig = kubeconfig_via(controlplane, proxy, tmp_path / "kubeconfig")
    kube = Kube.from_config(kubeconfig=str(kubeconfig), max_workers=4, request_timeout=5.0)
    yield LeaseStore(kube)
    asyncio.run(kube.close())


def created(store: LeaseStore, namespace: str) -> dict[str, Any]:
    """Lease "a" held by replica-a, returned as the body that hands it to replica-b."""
    body = {"metadata": {"name": "a"}, "spec": {"holderIdentity": "replica-a"}}
    lease = asyncio.run(store.create(namespace=namespace, body=body))
    return {**lease, "spec": {**lease["spec"], "holderIdentity": "replica-b"}}


def holder_of(store: LeaseStore, namespace: str) -> str:
    found = asyncio.run(store.get(namespace=namespace, name="a"))
    assert found is not None
    return str(found["spec"]["holderIdentity"])


def test_a_kube_works_through_a_proxy(proxied: LeaseStore, namespace: str) -> None:
    update = created(proxied, namespace)

    asyncio.run(proxied.replace(namespace=namespace, body=update))

    assert holder_of(proxied, namespace) == "replica-b"


def test_a_partitioned_kube_is_unavailable_until_the_proxy_heals(
    proxied: LeaseStore, proxy: Proxy, namespace: str
) -> None:
    update = created(proxied, namespace)
    proxy.partition()

    with pytest.raises(Unavailable):
        asyncio.run(proxied.get(namespace=namespace, name="a"))
    with pytest.raises(Unavailable):
        asyncio.run(proxied.replace(namespace=namespace, body=update))

    proxy.heal()
    assert holder_of(proxied, namespace) == "replica-a"  # the write never got through


def test_a_write_into_a_blackhole_times_out_as_outcome_unknown(
    proxied: LeaseStore, proxy: Proxy, namespace: str
) -> None:
    update = created(proxied, namespace)
    proxy.blackhole()

    with pytest.raises(OutcomeUnknown, match="timed out"):
        asyncio.run(proxied.replace(namespace=namespace, body=update, timeout=1.0))

    proxy.clear()
    assert holder_of(proxied, namespace) == "replica-a"  # dropped on the way in


def test_a_write_on_a_reset_connection_has_an_unknown_outcome(
    proxied: LeaseStore, proxy: Proxy, namespace: str
) -> None:
    update = created(proxied, namespace)
    proxy.reset_peer()

    with pytest.raises(OutcomeUnknown):
        asyncio.run(proxied.replace(namespace=namespace, body=update))

    proxy.clear()
    assert holder_of(proxied, namespace) == "replica-a"


def test_only_loopback_upstreams_are_accepted(toxiproxy: Toxiproxy) -> None:
    with pytest.raises(ValueError, match=r"only target 127.0.0.0/8, got host '10.0.0.1'"):
        toxiproxy.proxy("elsewhere", 443, upstream_host="10.0.0.1")
