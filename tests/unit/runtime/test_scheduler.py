"""The Scheduler before it runs: settings, defaults from the environment, registration."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from leasecron import JobContext, Scheduler
from leasecron.runtime._environment import default_namespace


def test_handlers_register_by_decorator_or_call_and_are_listed() -> None:
    scheduler = Scheduler("billing-api", namespace="billing", identity="pod-a-1")

    @scheduler.job("nightly_report")
    def nightly_report(ctx: JobContext) -> None:
        del ctx

    async def poller(ctx: JobContext) -> None:
        del ctx

    assert scheduler.register("queue-poller", poller) is poller
    assert scheduler.handlers == ("nightly_report", "queue-poller")
    assert scheduler.handler("nightly_report") is nightly_report
    assert scheduler.handler("missing") is None
    assert (scheduler.group, scheduler.namespace, scheduler.identity) == (
        "billing-api",
        "billing",
        "pod-a-1",
    )
    assert not scheduler.running and scheduler.jobs == () and scheduler.ignored == {}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"group": "not a label"}, "group"),
        ({"grace_period": -1.0}, "grace_period"),
        ({"max_threads": 0}, "max_threads"),
        ({"identity": " "}, "identity"),
    ],
)
def test_bad_settings_are_refused_with_the_setting_named(
    kwargs: dict[str, object], message: str
) -> None:
    group = kwargs.pop("group", "default")
    with pytest.raises(ValueError, match=message):
        Scheduler(group, namespace="ns", **kwargs)  # type: ignore[arg-type]


def test_the_identity_defaults_to_the_pod_name_with_a_random_suffix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POD_NAME", "api-7d9f-x2")
    first, second = Scheduler(namespace="ns"), Scheduler(namespace="ns")
    assert first.identity.startswith("api-7d9f-x2-") and first.identity != second.identity


def test_the_namespace_comes_from_pod_namespace_then_the_kubeconfig_then_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [
                    {
                        "name": "x",
                        "context": {"cluster": "c", "user": "u", "namespace": "from-config"},
                    }
                ],
                "current-context": "x",
            }
        )
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(config))
    monkeypatch.setenv("POD_NAMESPACE", "from-pod")
    assert default_namespace() == "from-pod"
    monkeypatch.delenv("POD_NAMESPACE")
    assert default_namespace() == "from-config"
    assert Scheduler().namespace == "from-config"
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    assert default_namespace() == "default"


def test_stop_before_start_is_harmless() -> None:
    scheduler = Scheduler(namespace="ns", identity="pod-a-1")
    scheduler.register("nightly", lambda ctx: None)
    scheduler.stop()  # no thread to join: returns at once rather than waiting out a timeout
    scheduler.stop(timeout=0.0)
    assert not scheduler.running
    assert scheduler.wait_ready(0.0) is False  # never started, so never ready
    assert scheduler.handlers == ("nightly",)
    assert (scheduler.jobs, scheduler.ignored) == ((), {})
