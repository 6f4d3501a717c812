"""What the fencing store tests share: a run value (any object with namespace, job, tick and
token is a run to the helpers), the invoices table they write and its creation, and counter
readings."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa
from prometheus_client import REGISTRY

from leasecron.fencing import ddl_statements

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)

metadata = sa.MetaData()
invoices = sa.Table(
    "invoices",
    metadata,
    sa.Column("customer", sa.Text, primary_key=True),
    sa.Column("month", sa.Text, primary_key=True),
    sa.Column("total", sa.Integer, nullable=False),
    sa.Column("fence_token", sa.BigInteger, nullable=False),
)
no_token = sa.Table(
    "no_token",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("total", sa.Integer),
)
INVOICES_SQL = (
    "CREATE TABLE invoices (customer TEXT, month TEXT, total INTEGER NOT NULL, "
    "fence_token BIGINT NOT NULL, PRIMARY KEY (customer, month))"
)
NO_TOKEN_SQL = "CREATE TABLE no_token (id INTEGER PRIMARY KEY, total INTEGER)"


def create_store_tables(engine: sa.Engine, *tables: str) -> None:
    """leasecron's fencing tables, then `tables` (CREATE TABLE statements), in one transaction."""
    with engine.begin() as conn:
        for statement in (*ddl_statements(), *tables):
            conn.exec_driver_sql(statement)


@dataclass(frozen=True)
class Run:
    token: int | None
    namespace: str = "billing"
    job: str = "invoices"
    tick: datetime = TICK


def refused_writes(store: str, check: str, job: str = "invoices") -> float:
    value = REGISTRY.get_sample_value(
        "leasecron_fenced_writes_refused_total",
        {"store": store, "job_namespace": "billing", "scheduled_job": job, "check": check},
    )
    return value or 0.0


def refused_claims(store: str, job: str = "invoices") -> float:
    value = REGISTRY.get_sample_value(
        "leasecron_period_claims_refused_total",
        {"store": store, "job_namespace": "billing", "scheduled_job": job},
    )
    return value or 0.0
