"""What `helm template` renders for the Grafana dashboard, with the real helm binary and no
cluster: nothing by default; when enabled, one ConfigMap with the Grafana sidecar's label (or
the one configured) holding exactly the chart's dashboard JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chart_helpers import CHART, Helm

from leasecron.testing import Assets, ensure_assets

DASHBOARD = json.loads((CHART / "dashboards" / "leasecron.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    assets: Assets = ensure_assets(names=("helm",))
    return Helm(binary=assets.binary("helm"), home=tmp_path_factory.mktemp("helm-home"))


def dashboards(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == "ConfigMap" and "leasecron.json" in o["data"]]


def test_no_dashboard_is_rendered_by_default(helm: Helm) -> None:
    assert dashboards(helm.template()) == []


def test_the_enabled_dashboard_is_a_configmap_the_grafana_sidecar_picks_up(helm: Helm) -> None:
    [configmap] = dashboards(helm.template("dashboard.enabled=true"))
    metadata = configmap["metadata"]
    assert metadata["name"] == "leasecron-dashboard"
    assert metadata["namespace"] == "leasecron-system"
    assert metadata["labels"]["grafana_dashboard"] == "1"
    assert metadata["labels"]["app.kubernetes.io/instance"] == "leasecron"
    assert json.loads(configmap["data"]["leasecron.json"]) == DASHBOARD


def test_the_sidecar_label_namespace_and_annotations_can_be_chosen(helm: Helm) -> None:
    [configmap] = dashboards(
        helm.template(
            "dashboard.enabled=true",
            "dashboard.namespace=monitoring",
            "dashboard.label=grafana_dashboards",
            "dashboard.labelValue=leasecron",
            "dashboard.labels.team=platform",
            "dashboard.annotations.grafana_folder=Scheduling",
        )
    )
    metadata = configmap["metadata"]
    assert metadata["namespace"] == "monitoring"
    assert metadata["labels"]["grafana_dashboards"] == "leasecron"
    assert "grafana_dashboard" not in metadata["labels"]
    assert metadata["labels"]["team"] == "platform"
    assert metadata["annotations"] == {"grafana_folder": "Scheduling"}


def test_an_unknown_dashboard_value_is_refused(helm: Helm) -> None:
    assert "dashboard" in helm.refusal("dashboard.enable=true")
