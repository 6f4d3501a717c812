"""The example app's shared ledger: the application's database, written by every replica and
read by the demo driver. A SQLite file by default (nothing to install); PostgreSQL when given a
URL (`postgresql+psycopg://...`): the same code, through SQLAlchemy.

It shows the three defences a job's own store needs (docs/how-to/duplicates.md), whatever
leasecron does, with the helpers of `leasecron.fencing`:

- **A fence.** Every guarded write first holds the job's fence (`hold_fence`) with the run's
  fencing token: the ledger keeps the highest token it has seen per job and refuses a lower
  one, so a replica that lost its grant while paused cannot write after its successor did.
- **A per-period record.** An invoice is written, and its mail queued, only by the run that
  claims the tick (`claim_period`): a second run of the same tick bills nothing and mails
  no one.
- **A natural key.** The invoice row is keyed by the run's idempotency key
  (`<namespace>/<job>/<tick>`) and written with `fenced_upsert`.

Every `send_invoices` call is also logged in `attempts` (whatever its outcome) so the driver
can count runs per tick, and each single-owner ownership term in `terms`. Every call is one
transaction on a connection of its own (the handlers run in threads and in several processes;
SQLite transactions begin IMMEDIATE). What it does not promise: anything beyond what the
database's own locking does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from leasecron.fencing import claim_period, fenced_upsert, fencing_tables, hold_fence
from leasecron.models.names import parse_tick

_metadata = sa.MetaData()
customers = sa.Table(
    "customers",
    _metadata,
    sa.Column("id", sa.Text, primary_key=True),
    sa.Column("plan", sa.Text, nullable=False),
    sa.Column("monthly_cents", sa.Integer, nullable=False),
)
invoices = sa.Table(
    "invoices",
    _metadata,
    sa.Column("idempotency_key", sa.Text, primary_key=True),
    sa.Column("tick", sa.Text, nullable=False),
    sa.Column("fence_token", sa.BigInteger, nullable=False),
    sa.Column("replica", sa.Text, nullable=False),
    sa.Column("total_cents", sa.Integer, nullable=False),
    sa.Column("written_at", sa.Float, nullable=False),
)
attempts_table = sa.Table(
    "attempts",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("job", sa.Text, nullable=False),
    sa.Column("tick", sa.Text, nullable=False),
    sa.Column("token", sa.BigInteger),
    sa.Column("replica", sa.Text, nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("at", sa.Float, nullable=False),
)
mail_queue = sa.Table(
    "queue",
    _metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("payload", sa.Text, nullable=False),
    sa.Column("enqueued_at", sa.Float, nullable=False),
    sa.Column("done_by", sa.Text),
    sa.Column("done_token", sa.BigInteger),
    sa.Column("done_at", sa.Float),
)
terms_table = sa.Table(
    "terms",
    _metadata,
    sa.Column("job", sa.Text, primary_key=True),
    sa.Column("token", sa.BigInteger, primary_key=True),
    sa.Column("replica", sa.Text, nullable=False),
    sa.Column("started_at", sa.Float, nullable=False),
    sa.Column("ended_at", sa.Float),
    sa.Column("processed", sa.Integer, nullable=False, server_default="0"),
)
fencing_tables(_metadata)

_CUSTOMERS = (("acme", "pro", 4900), ("globex", "team", 1900), ("initech", "free", 0))


class StaleTokenError(RuntimeError):
    """A write carried a fencing token lower than one the ledger has already seen."""


class InvoiceOutcome(StrEnum):
    """What one `record_invoice` call did."""

    WRITTEN = "written"  # a new invoice row (and a mail for the queue poller)
    DUPLICATE = "duplicate"  # the tick was claimed already: nothing billed, nothing mailed
    STALE = "stale"  # rejected: a newer grant has written already


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One send_invoices run as the ledger saw it."""

    tick: str
    token: int | None
    replica: str
    outcome: str
    at: float


@dataclass(frozen=True, kw_only=True)
class Term:
    """One single-owner ownership term."""

    job: str
    token: int
    replica: str
    started_at: float
    ended_at: float | None
    processed: int


@dataclass(frozen=True)
class _Run:
    """A run as the fencing helpers read it (any object with these attributes will do; a
    handler passes its `JobContext`)."""

    namespace: str
    job: str
    tick: datetime
    token: int | None


def ledger_url(location: Path | str) -> str:
    """A database URL as given, or a SQLite file's path as its URL."""
    text = str(location)
    return text if "://" in text else f"sqlite:///{Path(text).resolve()}"


def _engine(url: str) -> sa.Engine:
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True)
    engine = sa.create_engine(url, connect_args={"timeout": 30.0}, poolclass=sa.NullPool)

    @sa.event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, _: Any) -> None:
        dbapi_connection.isolation_level = None  # SQLAlchemy emits BEGIN, below
        dbapi_connection.execute("PRAGMA journal_mode=WAL")  # readers never block writers

    @sa.event.listens_for(engine, "begin")
    def _begin(conn: sa.Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")  # one writer at a time, no upgrade deadlock

    return engine


class Ledger:
    """The shared database at `location` (a SQLite file's path, or a database URL). Cheap to
    construct; every method is one transaction."""

    def __init__(self, location: Path | str) -> None:
        self.location = str(location)
        self.url = ledger_url(location)
        self._engine = _engine(self.url)

    def create(self, *, fresh: bool = False) -> Ledger:
        """Create the tables and seed the customers; `fresh` drops the ledger's own tables
        first (nothing else)."""
        with self._engine.begin() as db:
            if fresh:
                _metadata.drop_all(db)
            _metadata.create_all(db)
            existing = set(db.execute(sa.select(customers.c.id)).scalars())
            rows = [
                {"id": c, "plan": plan, "monthly_cents": cents}
                for c, plan, cents in _CUSTOMERS
                if c not in existing
            ]
            if rows:
                db.execute(customers.insert(), rows)
        return self

    def close(self) -> None:
        self._engine.dispose()

    # -- writes, from the example app -----------------------------------------------------

    def monthly_prices(self) -> dict[str, int]:
        """Customer id -> monthly price in cents (what refresh_cache reloads)."""
        with self._engine.connect() as db:
            rows = db.execute(sa.select(customers.c.id, customers.c.monthly_cents).order_by("id"))
            return {str(customer): int(cents) for customer, cents in rows}

    def record_invoice(
        self, *, job: str, key: str, tick: str, token: int | None, replica: str
    ) -> InvoiceOutcome:
        """Write the invoice of one tick, fenced by `token` and keyed by `key`; log the attempt.
        A run without a token (unguarded) cannot prove it is current and is rejected."""
        now = time.time()
        run = _Run(namespace=key.split("/")[0], job=job, tick=parse_tick(tick), token=token)
        with self._engine.begin() as db:
            if token is None or not hold_fence(db, job, run=run):
                outcome = InvoiceOutcome.STALE
            elif not claim_period(db, run=run):
                outcome = InvoiceOutcome.DUPLICATE
            else:
                total = db.execute(
                    sa.select(sa.func.coalesce(sa.func.sum(customers.c.monthly_cents), 0))
                )
                values = {
                    "tick": tick,
                    "replica": replica,
                    "total_cents": int(total.scalar_one()),
                    "written_at": now,
                }
                fenced_upsert(db, invoices, key={"idempotency_key": key}, values=values, run=run)
                payload = json.dumps({"mail": "invoice", "key": key})
                db.execute(mail_queue.insert().values(payload=payload, enqueued_at=now))
                outcome = InvoiceOutcome.WRITTEN
            db.execute(
                attempts_table.insert().values(
                    job=job, tick=tick, token=token, replica=replica, outcome=outcome.value, at=now
                )
            )
        return outcome

    def begin_term(self, *, job: str, token: int, replica: str) -> None:
        """Record the start of an ownership term; StaleTokenError when a newer term exists."""
        with self._fenced(job, token) as db:
            known = db.execute(
                sa.select(terms_table.c.token).where(
                    terms_table.c.job == job, terms_table.c.token == token
                )
            ).first()
            if known is None:
                db.execute(
                    terms_table.insert().values(
                        job=job, token=token, replica=replica, started_at=time.time()
                    )
                )

    def take_next_mail(self, *, job: str, token: int, replica: str) -> str | None:
        """Mark the oldest pending queue row done by this term and return its payload (None
        when the queue is empty); StaleTokenError when a newer term has written."""
        with self._fenced(job, token) as db:
            row = db.execute(
                sa.select(mail_queue.c.id, mail_queue.c.payload)
                .where(mail_queue.c.done_at.is_(None))
                .order_by(mail_queue.c.id)
                .limit(1)
            ).first()
            if row is None:
                return None
            db.execute(
                mail_queue.update()
                .where(mail_queue.c.id == row.id)
                .values(done_by=replica, done_token=token, done_at=time.time())
            )
            db.execute(
                terms_table.update()
                .where(terms_table.c.job == job, terms_table.c.token == token)
                .values(processed=terms_table.c.processed + 1)
            )
            return str(row.payload)

    def end_term(self, *, job: str, token: int) -> None:
        """Record the end of an ownership term (a term that never ends was killed)."""
        with self._engine.begin() as db:
            db.execute(
                terms_table.update()
                .where(terms_table.c.job == job, terms_table.c.token == token)
                .values(ended_at=time.time())
            )

    @contextmanager
    def _fenced(self, job: str, token: int) -> Iterator[sa.Connection]:
        """A transaction that holds `job`'s fence at `token`; StaleTokenError when a newer
        token holds it (nothing is written then)."""
        run = _Run(namespace="demo", job=job, tick=_TERM_TICK, token=token)
        with self._engine.begin() as db:
            if not hold_fence(db, job, run=run):
                raise StaleTokenError(f"{job}: term token {token} is older than the ledger's")
            yield db

    # -- reads, for the driver ------------------------------------------------------------

    def attempts(self, *, job: str) -> list[Attempt]:
        """Every send_invoices attempt for `job`, oldest first."""
        a = attempts_table.c
        query = sa.select(a.tick, a.token, a.replica, a.outcome, a.at).where(a.job == job)
        with self._engine.connect() as db:
            rows = db.execute(query.order_by(a.id)).all()
        return [Attempt(tick=r[0], token=r[1], replica=r[2], outcome=r[3], at=r[4]) for r in rows]

    def terms(self, *, job: str) -> list[Term]:
        """Every ownership term of `job`, by token."""
        t = terms_table.c
        query = sa.select(t.job, t.token, t.replica, t.started_at, t.ended_at, t.processed)
        with self._engine.connect() as db:
            rows = db.execute(query.where(t.job == job).order_by(t.token)).all()
        return [
            Term(job=r[0], token=r[1], replica=r[2], started_at=r[3], ended_at=r[4], processed=r[5])
            for r in rows
        ]

    def queue_counts(self) -> tuple[int, int]:
        """(mails enqueued, mails processed)."""
        query = sa.select(sa.func.count(), sa.func.count(mail_queue.c.done_at))
        with self._engine.connect() as db:
            row = db.execute(query).one()
        return int(row[0]), int(row[1])

    def invoice_count(self) -> int:
        with self._engine.connect() as db:
            return int(db.execute(sa.select(sa.func.count()).select_from(invoices)).scalar_one())


_TERM_TICK = datetime.fromtimestamp(0).astimezone()
"""A single-owner term's fence does not look at the tick; the run needs one all the same."""
