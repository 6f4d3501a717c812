"""Fixtures shared by the integration modules (the cluster fixtures themselves, `kube_api`,
`namespace`, `kubeconfig`, `leasecron_crds`, ..., come from leasecron.testing.pytest_plugin).

Only what several modules used to copy lives here; a module that needs a variant (another
timeout, say) defines its own fixture of the same name, which takes precedence."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from leasecron.kube.clients import Kube


@pytest.fixture
def kube(kubeconfig: Path, leasecron_crds: list[str]) -> Iterator[Kube]:
    """leasecron's own client for the test cluster, with the CRDs installed; closed after."""
    made = Kube.from_config(kubeconfig=str(kubeconfig))
    yield made
    made.api_client.rest_client.close()
