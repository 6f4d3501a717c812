"""One replica of the example app for `leasecron bench chaos`: the same three handlers, with
every side effect sent to the bench's fenced ledger over HTTP instead of a SQLite file, a wall
clock that may be off, and a little work before the once-per-tick write.

    python -m leasecron.demo._chaos_replica --group G --ledger-url URL [--skew S] [--work-ms W]

Differences from `example_app` (the handlers' logic is the example app's own):

- `--ledger-url`: the ledger is a service outside the replicas (it survives their kills and
  stops, and the bench reads what it recorded). A refused write is `StaleTokenError`.
- `--skew`: this replica's wall clock is off by S seconds (monotonic time is not).
- `--work-ms`: `send-invoices` works this long before it checks its grant and writes, so a
  replica stopped in the middle of a run resumes holding a grant that has expired.
- Every second it prints a `stats` line with its API requests by verb and resource, read from
  its own Prometheus counter, so the bench can count writes per run.

Requests under faults come from the file `LEASECRON_FAULTS` names, installed on this replica's
Kube by `leasecron.testing.faults.install_from_env` (see docs/faults.md); the bench points
`KUBECONFIG` at a Toxiproxy per replica. Owns nothing the example app does not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from prometheus_client import REGISTRY

from leasecron import JobContext, Scheduler
from leasecron.demo._ledger import InvoiceOutcome, Ledger, StaleTokenError
from leasecron.demo.example_app import Events, ExampleApp
from leasecron.kube.clients import Kube
from leasecron.models.clocks import SystemClock
from leasecron.testing.faults import install_from_env

_LEDGER_TIMEOUT = 30.0
_STATS_SECONDS = 1.0


class LedgerClient(Ledger):
    """The example app's `Ledger` calls, sent to the bench's fenced ledger (its own database
    is unused: the ledger service writes the effects, to PostgreSQL through
    leasecron.fencing when the bench has one)."""

    def __init__(self, url: str) -> None:
        super().__init__(Path("unused"))
        self.url = url.rstrip("/")

    def _call(self, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            self.url + path, data=data, method="POST" if data else "GET"
        )
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=_LEDGER_TIMEOUT) as response:
                return int(response.status), json.loads(response.read())
        except urllib.error.HTTPError as e:
            return int(e.code), json.loads(e.read() or b"{}")

    def create(self, *, fresh: bool = False) -> LedgerClient:
        return self

    def monthly_prices(self) -> dict[str, int]:
        return {str(k): int(v) for k, v in self._call("/prices")[1]["prices"].items()}

    def record_invoice(
        self, *, job: str, key: str, tick: str, token: int | None, replica: str
    ) -> InvoiceOutcome:
        body = {"job": job, "tick": tick, "token": token, "replica": replica, "key": key}
        return InvoiceOutcome(self._call("/invoice", body)[1]["outcome"])

    def _term(self, path: str, *, job: str, token: int, replica: str) -> str | None:
        status, answer = self._call(path, {"job": job, "token": token, "replica": replica})
        if status == 409:
            raise StaleTokenError(f"{job}: term token {token} is older than the ledger's")
        mail = answer.get("mail")
        return str(mail) if mail is not None else None

    def begin_term(self, *, job: str, token: int, replica: str) -> None:
        self._term("/term/begin", job=job, token=token, replica=replica)

    def take_next_mail(self, *, job: str, token: int, replica: str) -> str | None:
        return self._term("/mail/take", job=job, token=token, replica=replica)

    def end_term(self, *, job: str, token: int) -> None:
        self._call("/term/end", {"job": job, "token": token})


class ChaosApp(ExampleApp):
    """The example app, with `work_seconds` of work before the once-per-tick write."""

    def __init__(self, *, ledger: Ledger, events: Events, work_seconds: float) -> None:
        super().__init__(ledger=ledger, events=events)
        self.work_seconds = work_seconds

    def send_invoices(self, ctx: JobContext) -> None:
        time.sleep(self.work_seconds)  # computing the invoice: CPU, not an idle wait
        super().send_invoices(ctx)


def api_requests() -> dict[str, int]:
    """This process's API requests so far, as `verb resource` -> count."""
    counts: dict[str, int] = {}
    for metric in REGISTRY.collect():
        for sample in metric.samples:
            if sample.name == "leasecron_api_requests_total":
                key = f"{sample.labels['verb']} {sample.labels['resource']}"
                counts[key] = counts.get(key, 0) + int(sample.value)
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leasecron.demo._chaos_replica")
    parser.add_argument("--group", required=True)
    parser.add_argument("--ledger-url", required=True)
    parser.add_argument("--skew", type=float, default=0.0, help="wall clock offset, seconds")
    parser.add_argument("--work-ms", type=float, default=300.0)
    args = parser.parse_args(argv)
    clock = SystemClock(skew=timedelta(seconds=args.skew))
    kube = Kube.from_config()
    install_from_env(kube)
    scheduler = Scheduler(args.group, clock=clock, kube=kube)
    events = Events(replica=scheduler.identity)
    app = ChaosApp(
        ledger=LedgerClient(args.ledger_url), events=events, work_seconds=args.work_ms / 1000
    )
    scheduler.register("refresh-cache", app.refresh_cache)
    scheduler.register("send-invoices", app.send_invoices)
    scheduler.register("queue-poller", app.queue_poller)

    def report() -> None:
        if scheduler.wait_ready():
            events.emit("ready", namespace=scheduler.namespace, skew=args.skew)
        while True:
            events.emit("stats", requests=api_requests())
            time.sleep(_STATS_SECONDS)  # a periodic report: nothing to wait on

    threading.Thread(target=report, name="chaos-report", daemon=True).start()
    scheduler.run_forever()
    asyncio.run(kube.close())  # the Scheduler closes only a Kube it made itself
    events.emit("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
