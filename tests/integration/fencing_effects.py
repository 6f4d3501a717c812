"""What a billing run writes in the proof tests, on every store at once, through each helper:
the run's invoices (a fenced upsert by natural key, SQLAlchemy and psycopg on PostgreSQL,
SQLAlchemy on SQLite, a fenced hash on Redis), a ledger line behind a fence (PostgreSQL,
SQLite, Redis), and for a period claim, a reminder "sent" only by the run that claimed the
period. Used by the test process (the successor) and by `_fencing_replica.py`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis
import sqlalchemy as sa
from fencing_helpers import INVOICES_SQL, create_store_tables, invoices

from leasecron.fencing import (
    RunLike,
    claim_period,
    fenced_upsert,
    hold_fence,
    pg_claim_period,
    pg_fenced_upsert,
    redis_claim_period,
    redis_fenced_exec,
    redis_fenced_hset,
)

CUSTOMERS = ("acme", "globex")
ledger = sa.Table("ledger", invoices.metadata, sa.Column("line", sa.Text), extend_existing=True)


@dataclass(frozen=True)
class Stores:
    """Where to write: a PostgreSQL URL (SQLAlchemy), its psycopg DSN, a SQLite URL, a Redis
    URL."""

    postgres: str
    dsn: str
    sqlite: str
    redis: str

    def as_dict(self) -> dict[str, str]:
        return {
            "postgres": self.postgres,
            "dsn": self.dsn,
            "sqlite": self.sqlite,
            "redis": self.redis,
        }


def create_tables(stores: Stores) -> None:
    for url in (stores.postgres, stores.sqlite):
        engine = sa.create_engine(url)
        create_store_tables(engine, INVOICES_SQL, "CREATE TABLE ledger (line TEXT)")
        engine.dispose()
    with psycopg.connect(stores.dsn, autocommit=True) as conn:
        conn.execute(INVOICES_SQL.replace("invoices", "invoices_psycopg"))


def bill(stores: Stores, run: RunLike, total: int) -> dict[str, bool]:
    """Write the run's invoices (`total` each) and one ledger line; which writes applied."""
    applied: dict[str, bool] = {}
    for name, url in (("postgres", stores.postgres), ("sqlite", stores.sqlite)):
        engine = sa.create_engine(url)
        with engine.begin() as c:
            for customer in CUSTOMERS:
                key = {"customer": customer, "month": "2026-03"}
                outcome = fenced_upsert(c, invoices, key=key, values={"total": total}, run=run)
                applied[f"{name} upsert {customer}"] = bool(outcome)
        with engine.begin() as c:
            fence = hold_fence(c, "ledger", run=run)
            if fence:
                c.execute(ledger.insert().values(line=f"total {total}"))
            applied[f"{name} fence"] = bool(fence)
        engine.dispose()
    with psycopg.connect(stores.dsn) as conn:
        for customer in CUSTOMERS:
            key = {"customer": customer, "month": "2026-03"}
            outcome = pg_fenced_upsert(
                conn, "invoices_psycopg", key=key, values={"total": total}, run=run
            )
            applied[f"psycopg upsert {customer}"] = bool(outcome)
    with redis.Redis.from_url(stores.redis) as r:
        for customer in CUSTOMERS:
            outcome = redis_fenced_hset(r, f"invoice:{customer}", {"total": total}, run=run)
            applied[f"redis upsert {customer}"] = bool(outcome)
        fence = redis_fenced_exec(
            r, [("RPUSH", "ledger", f"total {total}")], fence="ledger", run=run
        )
        applied["redis fence"] = bool(fence)
    return applied


def remind(stores: Stores, run: RunLike, sent: Path, identity: str) -> dict[str, bool]:
    """Claim the run's period on every store; a reminder is "sent" (a line appended to
    `sent`) for each claim this run won, before the claim commits."""
    claims: dict[str, bool] = {}
    for name, url in (("postgres", stores.postgres), ("sqlite", stores.sqlite)):
        engine = sa.create_engine(url)
        with engine.begin() as c:
            claims[name] = _sent_if(bool(claim_period(c, run=run)), sent, f"{name} {identity}")
        engine.dispose()
    with psycopg.connect(stores.dsn) as conn:
        claims["psycopg"] = _sent_if(
            bool(pg_claim_period(conn, run=run, period="psycopg")), sent, f"psycopg {identity}"
        )
    with redis.Redis.from_url(stores.redis) as r:
        claims["redis"] = _sent_if(bool(redis_claim_period(r, run=run)), sent, f"redis {identity}")
    return claims


def _sent_if(claimed: bool, sent: Path, line: str) -> bool:
    if claimed:
        with sent.open("a") as f:
            f.write(line + "\n")
    return claimed


def stored_totals(stores: Stores) -> dict[str, Any]:
    """Every invoice and ledger line as the stores keep them, with their tokens."""
    seen: dict[str, Any] = {}
    for name, url in (("postgres", stores.postgres), ("sqlite", stores.sqlite)):
        engine = sa.create_engine(url)
        with engine.connect() as c:
            rows = c.execute(
                sa.select(invoices.c.customer, invoices.c.total, invoices.c.fence_token)
            )
            seen[f"{name} invoices"] = sorted(tuple(row) for row in rows)
            seen[f"{name} ledger"] = [row[0] for row in c.execute(sa.select(ledger.c.line))]
        engine.dispose()
    with psycopg.connect(stores.dsn) as conn:
        rows = conn.execute("SELECT customer, total, fence_token FROM invoices_psycopg").fetchall()
        seen["psycopg invoices"] = sorted(tuple(row) for row in rows)
    with redis.Redis.from_url(stores.redis, decode_responses=True) as r:
        seen["redis invoices"] = sorted(
            (
                c,
                int(r.hget(f"invoice:{c}", "total") or 0),
                int(r.hget(f"invoice:{c}", "fence_token") or 0),
            )
            for c in CUSTOMERS
        )
        seen["redis ledger"] = r.lrange("ledger", 0, -1)
    return seen
