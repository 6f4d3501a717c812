"""`-w`: the view is printed once, then again each time it changes, until Ctrl-C; an API error
is one line and exit status 1, not a traceback."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from leasecron.cli import _kubectl
from leasecron.cli._kubectl import Target, show


class _FakeKube:
    closed = False

    async def close(self) -> None:
        self.closed = True


@pytest.fixture
def fake_kube(monkeypatch: pytest.MonkeyPatch) -> Iterator[_FakeKube]:
    kube = _FakeKube()
    monkeypatch.setattr(Target, "kube", lambda self: kube)
    monkeypatch.setattr(_kubectl, "WATCH_INTERVAL_S", 0.0)
    yield kube


TARGET = Target(kubeconfig=None, context=None, namespace="billing")


def test_watch_prints_only_when_the_view_changes_until_interrupted(
    fake_kube: _FakeKube, capsys: pytest.CaptureFixture[str]
) -> None:
    views = iter(["holder a", "holder a", "holder b", "holder b"])

    async def fetch(_kube: object) -> str:
        try:
            return next(views)
        except StopIteration:
            raise KeyboardInterrupt from None

    show(fetch, target=TARGET, watch=True, what="ScheduledJobs")
    assert capsys.readouterr().out == "holder a\n\nholder b\n"
    assert fake_kube.closed


def test_an_api_error_is_one_line(fake_kube: _FakeKube) -> None:
    async def fetch(_kube: object) -> str:
        raise OSError("connection refused")

    with pytest.raises(click.ClickException, match="cannot read Leases: connection refused"):
        show(fetch, target=TARGET, watch=False, what="Leases")
    assert fake_kube.closed
