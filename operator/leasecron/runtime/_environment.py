"""Where a replica runs: its namespace, from the pod's environment or the kubeconfig.

Owns the lookup order of the Scheduler's default namespace: `$POD_NAMESPACE` (the downward
API), then the service account's namespace file inside a pod, then the namespace of the
kubeconfig's current context, then "default". Reading the kubeconfig is local file access,
never a request; a kubeconfig that cannot be read counts as one without a namespace.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import kubernetes.config

from leasecron.models.identity import make_identity

POD_NAMESPACE_ENV = "POD_NAMESPACE"
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_GROUP = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def kubeconfig_namespace(*, kubeconfig: str | None = None) -> str | None:
    """The namespace of the kubeconfig's current context (`kubeconfig`, else $KUBECONFIG,
    else ~/.kube/config), or None."""
    path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    try:
        _, active = kubernetes.config.list_kube_config_contexts(  # type: ignore[no-untyped-call]
            config_file=path
        )
    except Exception:
        return None
    context = (active or {}).get("context") or {}
    namespace = context.get("namespace")
    return str(namespace) if namespace else None


def default_namespace(*, kubeconfig: str | None = None) -> str:
    """$POD_NAMESPACE, the service account namespace, the kubeconfig's, else "default"."""
    from_env = os.environ.get(POD_NAMESPACE_ENV, "").strip()
    if from_env:
        return from_env
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            in_pod = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            in_pod = ""
        if in_pod:
            return in_pod
    return kubeconfig_namespace(kubeconfig=kubeconfig) or "default"


def check_group(group: str) -> str:
    """`group` if it can be a label value (it labels member Leases); ValueError otherwise."""
    if not isinstance(group, str) or not _GROUP.fullmatch(group):
        raise ValueError(
            f"group {group!r} must be a label value: 1-63 letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return group


def resolve_identity(identity: str | None) -> str:
    """The given identity, or a new one (pod or host name plus a random suffix)."""
    if identity is None:
        return make_identity()
    if not identity.strip() or len(identity) > 200:
        raise ValueError(f"identity {identity!r} must be 1-200 characters")
    return identity
