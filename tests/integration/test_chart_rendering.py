"""What `helm template` refuses and what it renders for the chart's CRDs and alerts, with the
real helm binary and no cluster: values the operator would refuse fail here with a message
instead of in a crash-looping pod, the CRD templates carry exactly the repository's CRDs, and
the PrometheusRule alerts on the metrics the operator exports."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from chart_helpers import REPOSITORY_CRDS, Helm

from leasecron.testing import Assets, ensure_assets

KEEP = "helm.sh/resource-policy"


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    assets: Assets = ensure_assets(names=("helm",))
    return Helm(binary=assets.binary("helm"), home=tmp_path_factory.mktemp("helm-home"))


def _crds(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == "CustomResourceDefinition"}


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (
            ("operator.election.leaseDuration=10s", "operator.election.renewDeadline=10s"),
            "operator.election.leaseDuration (10s) must be at least renewDeadline (10s) + 1s",
        ),
        (
            ("operator.election.leaseDuration=5s",),
            "operator.election.leaseDuration (5s) must be at least renewDeadline (10s) + 1s",
        ),
        (
            ("operator.election.leaseDuration=10500ms",),
            "operator.election.leaseDuration (10500ms) must be at least renewDeadline (10s) + 1s",
        ),
        (
            ("operator.election.renewDeadline=2s",),
            "operator.election.renewDeadline (2s) must be greater than 1.2 times retryPeriod (2s)",
        ),
        (
            ("operator.election.retryPeriod=0s",),
            "operator.election.retryPeriod (0s) must be greater than zero",
        ),
        (
            ("app.serviceAccounts[0].name=api",),
            "app.serviceAccounts is set but app.namespaces is empty",
        ),
        (
            ("app.namespaces={billing}",),
            "app.namespaces is set but app.serviceAccounts is empty",
        ),
    ],
    ids=[
        "lease-equals-renew",
        "lease-below-renew",
        "lease-within-a-second-of-renew",
        "renew-within-jittered-retry",
        "zero-retry",
        "service-accounts-without-namespaces",
        "namespaces-without-service-accounts",
    ],
)
def test_helm_template_refuses_values_the_operator_would_refuse_with_a_message(
    helm: Helm, sets: tuple[str, ...], message: str
) -> None:
    assert message in helm.refusal(*sets)


@pytest.mark.parametrize(
    "sets",
    [
        ("operator.election.leaseDuration=11s",),
        (
            "operator.election.leaseDuration=1m30s",
            "operator.election.renewDeadline=1m",
            "operator.election.retryPeriod=1.5s",
        ),
        ("operator.election.renewDeadline=2500ms", "operator.election.leaseDuration=3.5s"),
    ],
    ids=["one-second-margin", "compound-durations", "fractions-and-milliseconds"],
)
def test_helm_template_accepts_timings_the_operator_accepts(
    helm: Helm, sets: tuple[str, ...]
) -> None:
    container = next(o for o in helm.template(*sets) if o["kind"] == "Deployment")
    args = container["spec"]["template"]["spec"]["containers"][0]["args"]
    for pair in sets:
        key, _, value = pair.partition("=")
        flag = {"leaseDuration": "lease-duration", "renewDeadline": "renew-deadline"}.get(
            key.rsplit(".", 1)[1], "retry-period"
        )
        assert f"--election-{flag}={value}" in args


def test_the_crd_templates_render_exactly_the_repository_crds_kept_on_uninstall(
    helm: Helm,
) -> None:
    rendered = _crds(helm.template(crds=True))
    source = {
        crd["metadata"]["name"]: crd
        for crd in (yaml.safe_load(p.read_text()) for p in sorted(REPOSITORY_CRDS.glob("*.yaml")))
    }

    assert (
        sorted(rendered)
        == sorted(source)
        == ["jobruns.leasecron.dev", "scheduledjobs.leasecron.dev"]
    )
    for name, crd in rendered.items():
        assert crd["spec"] == source[name]["spec"], name
        assert crd["metadata"]["annotations"] == {KEEP: "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/part-of"] == "leasecron"
        assert crd["metadata"]["labels"]["app.kubernetes.io/instance"] == "leasecron"


def test_crds_keep_false_drops_the_keep_policy_and_crds_enabled_false_renders_none(
    helm: Helm,
) -> None:
    unkept = _crds(helm.template("crds.keep=false", crds=True))
    assert [crd["metadata"].get("annotations", {}) for crd in unkept.values()] == [{}, {}]
    assert _crds(helm.template("crds.enabled=false", crds=True)) == {}


def test_the_prometheus_rule_alerts_on_missed_runs_and_stale_successes_per_job(
    helm: Helm,
) -> None:
    objects = helm.template(
        "prometheus.prometheusRule.enabled=true",
        "prometheus.prometheusRule.lastSuccessMaxAge=1h30m",
        "prometheus.prometheusRule.labels.release=kube-prometheus",
    )
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    alerts = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}

    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    assert sorted(alerts) == ["LeasecronLastSuccessTooOld", "LeasecronMissedRun"]
    missed, stale = (
        alerts["LeasecronMissedRun"]["expr"],
        alerts["LeasecronLastSuccessTooOld"]["expr"],
    )
    assert "increase(leasecron_missed_runs_total[15m])" in missed
    assert "leasecron_last_success_timestamp_seconds" in stale
    assert stale.rstrip().endswith("> 5400")
    for expr in (missed, stale):
        assert "by (job_namespace, scheduled_job)" in expr
    summary = alerts["LeasecronMissedRun"]["annotations"]["summary"]
    assert "{{ $labels.job_namespace }}/{{ $labels.scheduled_job }}" in summary


def test_no_prometheus_rule_is_rendered_by_default(helm: Helm) -> None:
    assert [o for o in helm.template() if o["kind"] == "PrometheusRule"] == []


def test_helmignore_keeps_the_sync_script_out_of_the_packaged_chart(
    helm: Helm, tmp_path: Path
) -> None:
    helm.run("package", str(REPOSITORY_CRDS.parent / "charts" / "leasecron"), "-d", str(tmp_path))
    (archive,) = tmp_path.glob("leasecron-*.tgz")
    listing = helm.run("show", "chart", str(archive)).stdout
    assert "name: leasecron" in listing
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "leasecron/files/crds/scheduledjobs.leasecron.dev.yaml" in names
    assert not [n for n in names if n.endswith(("sync-crds.sh", ".orig", "~"))]
