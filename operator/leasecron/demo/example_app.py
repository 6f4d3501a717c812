"""An example application with one scheduled job of each bucket. Copy it.

    python -m leasecron.demo.example_app [--group example-app] [--ledger PATH-OR-URL]

Run it as several replicas against a cluster where the ScheduledJobs of `examples/jobs/` are
applied (`leasecron demo` does all of that for you). The jobs:

- `refresh-cache` (every-replica): every replica reloads its own in-process price cache.
  No coordination: a lock here would leave all but one replica with a stale cache.
- `send-invoices` (once-per-tick): one replica per tick writes the tick's invoice to the
  shared ledger. Three defences in the *store* (`leasecron.fencing`), whatever the scheduler
  does: the write holds the job's fence with the run's token (the ledger refuses a token
  lower than the highest it has seen, so a replica that lost its grant while paused cannot
  write after its successor did), the tick's run record is claimed first (a second run of a
  tick bills nothing and queues no mail), and the invoice is an upsert keyed by the run's
  idempotency key.
- `queue-poller` (single-owner): one replica owns the mail queue and loops until it loses the
  Lease, the job goes away or the replica shuts down (`ctx.lost`). Each ownership term has
  its own fencing token; the ledger rejects the takes of an older term.

The shared ledger (`leasecron.demo._ledger`) stands in for your database: a SQLite file by
default, PostgreSQL when `--ledger` (or `$LEASECRON_DEMO_LEDGER`) is a URL. Every run prints
one JSON line on stdout (replica, job, tick, token, outcome) so that a driver can follow
the replicas; a real application would not need that. Logs (structlog JSON) go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from leasecron import JobContext, Scheduler
from leasecron.demo._ledger import InvoiceOutcome, Ledger, StaleTokenError

POLL_SECONDS = 0.25
"""How long the queue poller waits on an empty queue (it wakes at once when told to stop)."""


class Events:
    """One JSON line per run on stdout, from any handler thread."""

    def __init__(self, *, replica: str) -> None:
        self.replica = replica
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: Any) -> None:
        line = json.dumps({"ts": time.time(), "replica": self.replica, "event": event, **fields})
        with self._lock:
            print(line, flush=True)

    def run(self, ctx: JobContext, outcome: str, **fields: Any) -> None:
        """Report one run (or one moment of a single-owner term) of `ctx`."""
        tick = ctx.tick.strftime("%Y-%m-%dT%H:%M:%SZ")  # ctx.tick is aware UTC
        self.emit("run", job=ctx.job, tick=tick, token=ctx.token, outcome=outcome, **fields)


class ExampleApp:
    """The application's state and its three scheduled jobs."""

    def __init__(self, *, ledger: Ledger, events: Events) -> None:
        self.ledger = ledger
        self.events = events
        self.prices: dict[str, int] = {}  # the in-process cache refresh_cache keeps fresh

    def refresh_cache(self, ctx: JobContext) -> None:
        """every-replica: reload this replica's price cache (nothing to coordinate)."""
        self.prices = self.ledger.monthly_prices()
        self.events.run(ctx, "refreshed", entries=len(self.prices))

    def send_invoices(self, ctx: JobContext) -> None:
        """once-per-tick: write this tick's invoice, idempotently and fenced."""
        ctx.assert_held()  # the grant is still ours as far as this replica knows ...
        outcome = self.ledger.record_invoice(  # ... and the token lets the store be sure
            job=ctx.job,
            key=ctx.idempotency_key,  # "<namespace>/send-invoices/<tick>": the natural key
            tick=ctx.tick.strftime("%Y-%m-%dT%H:%M:%SZ"),
            token=ctx.token,
            replica=ctx.holder,
        )
        self.events.run(ctx, outcome.value)
        if outcome is InvoiceOutcome.STALE:
            raise StaleTokenError(f"the ledger has seen a newer grant than token {ctx.token}")

    def queue_poller(self, ctx: JobContext) -> None:
        """single-owner: send queued invoice mails until this replica stops being the owner."""
        token = ctx.token if ctx.token is not None else -1  # always set for single-owner
        self.ledger.begin_term(job=ctx.job, token=token, replica=ctx.holder)
        self.events.run(ctx, "term-started")
        sent = 0
        try:
            while not ctx.cancelled:
                mail = self.ledger.take_next_mail(job=ctx.job, token=token, replica=ctx.holder)
                if mail is None:
                    ctx.wait_lost(POLL_SECONDS)  # an idle wait that ends at once on handover
                    continue
                sent += 1
                ctx.logger.info("mail sent", mail=mail)
                self.events.run(ctx, "mailed", processed=sent)
        finally:
            self.ledger.end_term(job=ctx.job, token=token)
            self.events.run(ctx, "term-ended", processed=sent)


def build(*, group: str, ledger_path: Path | str) -> tuple[Scheduler, Events]:
    """The scheduler with the three handlers registered, and the event printer."""
    scheduler = Scheduler(group)  # namespace: $POD_NAMESPACE, else the kubeconfig's
    events = Events(replica=scheduler.identity)
    app = ExampleApp(ledger=Ledger(ledger_path).create(), events=events)
    # Handler names are what the ScheduledJobs' spec.handler says; it defaults to the job's name.
    scheduler.register("refresh-cache", app.refresh_cache)
    scheduler.register("send-invoices", app.send_invoices)
    scheduler.register("queue-poller", app.queue_poller)
    return scheduler, events


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m leasecron.demo.example_app")
    parser.add_argument("--group", default="example-app", help="the ScheduledJobs' spec.group")
    parser.add_argument(
        "--ledger",
        default=os.environ.get("LEASECRON_DEMO_LEDGER", "example-app-ledger.sqlite"),
        help="the database: a SQLite file, or a URL such as postgresql+psycopg://host/db "
        "(default: $LEASECRON_DEMO_LEDGER, else example-app-ledger.sqlite)",
    )
    args = parser.parse_args(argv)
    scheduler, events = build(group=args.group, ledger_path=args.ledger)

    def announce_ready() -> None:
        if scheduler.wait_ready():
            events.emit("ready", namespace=scheduler.namespace)

    threading.Thread(target=announce_ready, name="announce-ready", daemon=True).start()
    scheduler.run_forever()  # until SIGTERM/SIGINT: stops the handlers, releases the Leases
    events.emit("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
