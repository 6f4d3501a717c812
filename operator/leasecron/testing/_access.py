"""Talking to a test cluster as its admin or as a ServiceAccount: kubeconfig files, API
clients, and tokens minted with the TokenRequest API.

Owns `ClusterAccess`, the behaviour shared by a locally started `ControlPlane` and an
`ExistingCluster` reached through a kubeconfig (`LEASECRON_TEST_KUBECONFIG`). Does not create
ServiceAccounts or RBAC (see `_rbac`), and does not close the API clients it hands out: the
caller closes them (`ApiClient.close()`, or use them as context managers).
"""

from __future__ import annotations

import base64
import shutil
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import yaml
from kubernetes import client, config


def write_kubeconfig(
    path: Path,
    *,
    server: str,
    ca_pem: bytes | None,
    user: dict[str, str],
    verify_tls: bool = True,
    name: str = "leasecron-test",
) -> Path:
    """Write a single-context kubeconfig with the CA and credentials embedded; mode 0600.

    Without `ca_pem` the server is checked against the system CAs, or not at all when
    `verify_tls` is false."""
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    elif not verify_tls:
        cluster["insecure-skip-tls-verify"] = True
    document = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
        "preferences": {},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def admin_user(*, cert_file: Path, key_file: Path) -> dict[str, str]:
    """A kubeconfig `user` entry with the client certificate and key embedded."""
    return {"client-certificate-data": _b64(cert_file), "client-key-data": _b64(key_file)}


class ClusterAccess:
    """Admin and ServiceAccount access to one cluster.

    Subclasses provide `server` (the API server URL), `ca_file` (its CA bundle, None for the
    system CAs), `kubeconfig` (an admin kubeconfig path), `token_dir` (where
    `kubeconfig_for_token` writes files) and `api_client()`; `verify_tls` is False only for
    clusters configured to skip TLS verification.
    """

    verify_tls: bool = True

    @property
    def server(self) -> str:
        raise NotImplementedError

    @property
    def ca_file(self) -> Path | None:
        raise NotImplementedError

    @property
    def kubeconfig(self) -> Path:
        raise NotImplementedError

    @property
    def token_dir(self) -> Path:
        raise NotImplementedError

    def api_client(self) -> client.ApiClient:
        """A new admin `kubernetes.client.ApiClient`; close it when done."""
        raise NotImplementedError

    @property
    def version(self) -> str:
        """The server's gitVersion, e.g. `v1.36.3`."""
        with self.api_client() as api:
            info = client.VersionApi(api).get_code()
        return str(info.git_version)

    def mint_token(
        self, *, namespace: str, service_account: str, expiration_seconds: int = 3600
    ) -> str:
        """A bound token for an existing ServiceAccount via the TokenRequest API.

        The API server refuses lifetimes under 600 seconds."""
        body = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=expiration_seconds)
        )
        with self.api_client() as api:
            result = client.CoreV1Api(api).create_namespaced_service_account_token(
                name=service_account, namespace=namespace, body=body
            )
        if result.status is None or not result.status.token:
            raise RuntimeError(f"TokenRequest for {namespace}/{service_account} returned no token")
        return result.status.token

    def kubeconfig_for_token(self, *, token: str, name: str = "token") -> Path:
        """Write a kubeconfig that authenticates with `token`; returns its path."""
        safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
        ca_pem = self.ca_file.read_bytes() if self.ca_file is not None else None
        return write_kubeconfig(
            self.token_dir / f"{safe}.kubeconfig",
            server=self.server,
            ca_pem=ca_pem,
            verify_tls=self.verify_tls,
            user={"token": token},
        )

    def client_for_token(self, *, token: str) -> client.ApiClient:
        """A new `ApiClient` that authenticates with a bearer token; close it when done."""
        configuration = self._configuration()
        configuration.api_key = {"authorization": f"Bearer {token}"}
        return client.ApiClient(configuration)

    def client_for_serviceaccount(
        self, *, namespace: str, service_account: str, expiration_seconds: int = 3600
    ) -> client.ApiClient:
        """A new `ApiClient` acting as an existing ServiceAccount (minted token)."""
        token = self.mint_token(
            namespace=namespace,
            service_account=service_account,
            expiration_seconds=expiration_seconds,
        )
        return self.client_for_token(token=token)

    def _client_with_certificate(self, *, cert_file: Path, key_file: Path) -> client.ApiClient:
        """A new `ApiClient` that authenticates with a client certificate."""
        configuration = self._configuration()
        configuration.cert_file = str(cert_file)
        configuration.key_file = str(key_file)
        return client.ApiClient(configuration)

    def _configuration(self) -> client.Configuration:
        configuration = client.Configuration(host=self.server)
        configuration.verify_ssl = self.verify_tls
        if self.ca_file is not None:
            configuration.ssl_ca_cert = str(self.ca_file)
        return configuration


class ExistingCluster(ClusterAccess):
    """A cluster you already have, reached through a kubeconfig whose user may do anything.

    Used by the pytest plugin when `LEASECRON_TEST_KUBECONFIG` is set. It cannot stop or
    restart the API server. `close()` (or leaving the `with` block) removes the token
    kubeconfigs it wrote.
    """

    def __init__(self, *, kubeconfig: Path, context: str | None = None) -> None:
        self._kubeconfig = Path(kubeconfig)
        self._context = context
        loaded = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=str(self._kubeconfig),
            context=context,
            client_configuration=loaded,
            persist_config=False,
        )
        self._server = str(loaded.host)
        self._token_dir = Path(tempfile.mkdtemp(prefix="leasecron-kubeconfigs-"))
        self._ca_file: Path | None = None
        self.verify_tls = bool(loaded.verify_ssl)
        if loaded.ssl_ca_cert:
            self._ca_file = self._token_dir / "ca.crt"
            shutil.copyfile(loaded.ssl_ca_cert, self._ca_file)

    @property
    def server(self) -> str:
        return self._server

    @property
    def ca_file(self) -> Path | None:
        return self._ca_file

    @property
    def kubeconfig(self) -> Path:
        return self._kubeconfig

    @property
    def token_dir(self) -> Path:
        return self._token_dir

    def api_client(self) -> client.ApiClient:
        api: client.ApiClient = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self._kubeconfig), context=self._context, persist_config=False
        )
        return api

    def close(self) -> None:
        shutil.rmtree(self._token_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
