"""The example app's shared ledger: one SQLite file that stands in for the application's
database, written by every replica and read by the demo driver.

It shows the two defences a job's own store needs (docs/design.md §7), whatever leasecron does:

- **Natural keys.** An invoice row is keyed by the run's idempotency key
  (`<namespace>/<job>/<tick>`) and written with INSERT OR IGNORE, so a second run of the same
  tick cannot bill twice.
- **Fencing.** Every guarded write carries the run's fencing token; the ledger keeps the
  highest token it has seen per job and rejects a lower one, so a replica that lost its grant
  while paused cannot write after its successor did.

Every `send_invoices` call is also logged in `attempts` (whatever its outcome) so the driver
can count runs per tick, and each single-owner ownership term in `terms`. Transactions are
`BEGIN IMMEDIATE` on a connection per call (the handlers run in threads and in several
processes). What it does not promise: anything beyond one machine's SQLite locking.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

_SCHEMA = """
CREATE TABLE IF NOT EXISTS customers (
    id TEXT PRIMARY KEY, plan TEXT NOT NULL, monthly_cents INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS fences (
    job TEXT PRIMARY KEY, token INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS invoices (
    idempotency_key TEXT PRIMARY KEY, tick TEXT NOT NULL, token INTEGER NOT NULL,
    replica TEXT NOT NULL, total_cents INTEGER NOT NULL, written_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job TEXT NOT NULL, tick TEXT NOT NULL,
    token INTEGER, replica TEXT NOT NULL, outcome TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS queue (
    id INTEGER PRIMARY KEY AUTOINCREMENT, payload TEXT NOT NULL, enqueued_at REAL NOT NULL,
    done_by TEXT, done_token INTEGER, done_at REAL);
CREATE TABLE IF NOT EXISTS terms (
    job TEXT NOT NULL, token INTEGER NOT NULL, replica TEXT NOT NULL, started_at REAL NOT NULL,
    ended_at REAL, processed INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (job, token));
"""

_CUSTOMERS = (("acme", "pro", 4900), ("globex", "team", 1900), ("initech", "free", 0))


class StaleTokenError(RuntimeError):
    """A write carried a fencing token lower than one the ledger has already seen."""


class InvoiceOutcome(StrEnum):
    """What one `record_invoice` call did."""

    WRITTEN = "written"  # a new invoice row (and a mail for the queue poller)
    DUPLICATE = "duplicate"  # the tick's invoice was already there: INSERT OR IGNORE kept it
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


class Ledger:
    """The shared SQLite file. Cheap to construct; every method opens its own connection."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def create(self) -> Ledger:
        """Create the tables (WAL mode, so readers never block writers) and seed customers."""
        with closing(sqlite3.connect(self.path, timeout=30.0)) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            db.executemany("INSERT OR IGNORE INTO customers VALUES (?, ?, ?)", _CUSTOMERS)
            db.commit()
        return self

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    # -- writes, from the example app -----------------------------------------------------

    def monthly_prices(self) -> dict[str, int]:
        """Customer id -> monthly price in cents (what refresh_cache reloads)."""
        with closing(sqlite3.connect(self.path, timeout=30.0)) as db:
            rows = db.execute("SELECT id, monthly_cents FROM customers ORDER BY id").fetchall()
        return {str(customer): int(cents) for customer, cents in rows}

    def record_invoice(
        self, *, job: str, key: str, tick: str, token: int | None, replica: str
    ) -> InvoiceOutcome:
        """Write the invoice of one tick, fenced by `token` and keyed by `key`; log the attempt.
        A run without a token (unguarded) cannot prove it is current and is rejected."""
        now = time.time()
        with self._transaction() as db:
            if token is None or token < _highest_token(db, job):
                outcome = InvoiceOutcome.STALE
            else:
                _raise_fence(db, job, token)
                total = db.execute("SELECT COALESCE(SUM(monthly_cents), 0) FROM customers")
                inserted = db.execute(
                    "INSERT OR IGNORE INTO invoices VALUES (?, ?, ?, ?, ?, ?)",
                    (key, tick, token, replica, int(total.fetchone()[0]), now),
                ).rowcount
                outcome = InvoiceOutcome.WRITTEN if inserted == 1 else InvoiceOutcome.DUPLICATE
                if outcome is InvoiceOutcome.WRITTEN:
                    payload = json.dumps({"mail": "invoice", "key": key})
                    db.execute(
                        "INSERT INTO queue (payload, enqueued_at) VALUES (?, ?)", (payload, now)
                    )
            db.execute(
                "INSERT INTO attempts (job, tick, token, replica, outcome, at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (job, tick, token, replica, outcome.value, now),
            )
        return outcome

    def begin_term(self, *, job: str, token: int, replica: str) -> None:
        """Record the start of an ownership term; StaleTokenError when a newer term exists."""
        with self._transaction() as db:
            if token < _highest_token(db, job):
                raise StaleTokenError(f"{job}: term token {token} is older than the ledger's")
            _raise_fence(db, job, token)
            db.execute(
                "INSERT OR IGNORE INTO terms (job, token, replica, started_at) VALUES (?, ?, ?, ?)",
                (job, token, replica, time.time()),
            )

    def take_next_mail(self, *, job: str, token: int, replica: str) -> str | None:
        """Mark the oldest pending queue row done by this term and return its payload (None
        when the queue is empty); StaleTokenError when a newer term has written."""
        with self._transaction() as db:
            if token < _highest_token(db, job):
                raise StaleTokenError(f"{job}: term token {token} is older than the ledger's")
            row = db.execute(
                "SELECT id, payload FROM queue WHERE done_at IS NULL ORDER BY id LIMIT 1"
            ).fetchone()
            if row is None:
                return None
            db.execute(
                "UPDATE queue SET done_by = ?, done_token = ?, done_at = ? WHERE id = ?",
                (replica, token, time.time(), row[0]),
            )
            db.execute(
                "UPDATE terms SET processed = processed + 1 WHERE job = ? AND token = ?",
                (job, token),
            )
            return str(row[1])

    def end_term(self, *, job: str, token: int) -> None:
        """Record the end of an ownership term (a term that never ends was killed)."""
        with self._transaction() as db:
            db.execute(
                "UPDATE terms SET ended_at = ? WHERE job = ? AND token = ?",
                (time.time(), job, token),
            )

    # -- reads, for the driver ------------------------------------------------------------

    def attempts(self, *, job: str) -> list[Attempt]:
        """Every send_invoices attempt for `job`, oldest first."""
        with closing(sqlite3.connect(self.path, timeout=30.0)) as db:
            rows = db.execute(
                "SELECT tick, token, replica, outcome, at FROM attempts WHERE job = ? ORDER BY id",
                (job,),
            ).fetchall()
        return [Attempt(tick=r[0], token=r[1], replica=r[2], outcome=r[3], at=r[4]) for r in rows]

    def terms(self, *, job: str) -> list[Term]:
        """Every ownership term of `job`, by token."""
        with closing(sqlite3.connect(self.path, timeout=30.0)) as db:
            rows = db.execute(
                "SELECT job, token, replica, started_at, ended_at, processed FROM terms "
                "WHERE job = ? ORDER BY token",
                (job,),
            ).fetchall()
        return [
            Term(job=r[0], token=r[1], replica=r[2], started_at=r[3], ended_at=r[4], processed=r[5])
            for r in rows
        ]

    def queue_counts(self) -> tuple[int, int]:
        """(mails enqueued, mails processed)."""
        with closing(sqlite3.connect(self.path, timeout=30.0)) as db:
            row = db.execute("SELECT COUNT(*), COUNT(done_at) FROM queue").fetchone()
        return int(row[0]), int(row[1])

    def invoice_count(self) -> int:
        with closing(sqlite3.connect(self.path, timeout=30.0)) as db:
            return int(db.execute("SELECT COUNT(*) FROM invoices").fetchone()[0])


def _highest_token(db: sqlite3.Connection, job: str) -> int:
    row = db.execute("SELECT token FROM fences WHERE job = ?", (job,)).fetchone()
    return -1 if row is None else int(row[0])


def _raise_fence(db: sqlite3.Connection, job: str, token: int) -> None:
    db.execute(
        "INSERT INTO fences (job, token) VALUES (?, ?) "
        "ON CONFLICT (job) DO UPDATE SET token = MAX(token, excluded.token)",
        (job, token),
    )
