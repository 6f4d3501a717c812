"""Key material and kubeconfigs for a `NodeCluster`: one CA; serving certificates for the API
server (loopback, the node address, the `kubernetes` Service and its names) and the kubelet;
a client certificate per component, each in the identity its authorizer expects
(`system:node:<name>` in `system:nodes`, `system:kube-scheduler`, ...); the service-account
key pair.

Owns writing these into a directory. Like `_certs`, for tests only (EC P-256, one day).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from leasecron.testing._access import admin_user, write_kubeconfig
from leasecron.testing._certs import (
    _leaf,
    _name,
    _new_ca,
    _write_cert,
    _write_key,
    _write_service_account_keys,
)

CLIENTS = {
    "admin": ("leasecron-admin", "system:masters"),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", "system:masters"),
    "controller-manager": ("system:kube-controller-manager", None),
    "scheduler": ("system:kube-scheduler", None),
    "kube-proxy": ("system:kube-proxy", None),
}


@dataclass(frozen=True, kw_only=True)
class NodePki:
    """Where the files are: `cert(name)`/`key(name)` for each certificate, `kubeconfig(name)`
    for each client (server: the API server inside the node's network namespace)."""

    directory: Path

    @property
    def ca(self) -> Path:
        return self.directory / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.directory / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.directory / f"{name}.key"

    def kubeconfig(self, name: str) -> Path:
        return self.directory / f"{name}.kubeconfig"

    @property
    def service_account_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.directory / "sa.pub"


def _ips(*addresses: str) -> list[x509.GeneralName]:
    return [x509.IPAddress(ipaddress.ip_address(a)) for a in addresses]


def generate(
    directory: Path, *, node_name: str, node_ip: str, service_ip: str, inner_server: str
) -> NodePki:
    """Every certificate, key and component kubeconfig of one node cluster."""
    directory.mkdir(parents=True, exist_ok=True)
    pki = NodePki(directory=directory)
    ca, ca_key = _new_ca("leasecron-node-ca")
    _write_cert(pki.ca, ca)
    names = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
    names.append("kubernetes.default.svc.cluster.local")
    serving = {
        "apiserver": (
            "kube-apiserver",
            [x509.DNSName(n) for n in names] + _ips("127.0.0.1", node_ip, service_ip),
        ),
        "kubelet-serving": (node_name, [x509.DNSName(node_name), *_ips(node_ip, "127.0.0.1")]),
    }
    for name, (common_name, alt_names) in serving.items():
        cert, key = _leaf(
            subject=_name(common_name),
            ca=ca,
            ca_key=ca_key,
            usage=ExtendedKeyUsageOID.SERVER_AUTH,
            alt_names=alt_names,
        )
        _write_cert(pki.cert(name), cert)
        _write_key(pki.key(name), key)
    clients = {**CLIENTS, "kubelet": (f"system:node:{node_name}", "system:nodes")}
    for name, (common_name, organization) in clients.items():
        cert, key = _leaf(
            subject=_name(common_name, organization),
            ca=ca,
            ca_key=ca_key,
            usage=ExtendedKeyUsageOID.CLIENT_AUTH,
        )
        _write_cert(pki.cert(name), cert)
        _write_key(pki.key(name), key)
        write_kubeconfig(
            pki.kubeconfig(name),
            server=inner_server,
            ca_pem=pki.ca.read_bytes(),
            user=admin_user(cert_file=pki.cert(name), key_file=pki.key(name)),
        )
    _write_service_account_keys(pki.service_account_key, pki.service_account_pub)
    return pki
