"""leasecron.fencing on a real PostgreSQL (the session's server, a database per test), through
SQLAlchemy Core, an ORM session and psycopg: each check is in the statement that writes, a
refusal is a value and a counted metric, and bad input is named."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from fencing_helpers import (
    INVOICES_SQL,
    NO_TOKEN_SQL,
    Run,
    create_store_tables,
    invoices,
    no_token,
    refused_claims,
    refused_writes,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from leasecron.fencing import (
    FencingError,
    claim_period,
    fenced_upsert,
    hold_fence,
    pg_claim_period,
    pg_fenced_upsert,
    pg_hold_fence,
)
from leasecron.testing._stores import PostgresDatabase

KEY = {"customer": "acme", "month": "2026-03"}


class Base(DeclarativeBase):
    pass


class Invoice(Base):
    __tablename__ = "invoices"
    customer: Mapped[str] = mapped_column(primary_key=True)
    month: Mapped[str] = mapped_column(primary_key=True)
    total: Mapped[int]
    fence_token: Mapped[int] = mapped_column(sa.BigInteger)


@pytest.fixture
def engine(postgres_database: PostgresDatabase) -> Iterator[sa.Engine]:
    made = sa.create_engine(postgres_database.url)
    create_store_tables(made, INVOICES_SQL, NO_TOKEN_SQL)
    yield made
    made.dispose()


@pytest.fixture
def conn(engine: sa.Engine, postgres_database: PostgresDatabase) -> Iterator[Any]:
    with postgres_database.connect(autocommit=True) as made:
        yield made


def stored(engine: sa.Engine) -> tuple[int, int]:
    with engine.connect() as c:
        row = c.execute(sa.select(invoices.c.total, invoices.c.fence_token)).one()
    return row.total, row.fence_token


def test_a_second_claim_of_a_period_is_a_value_and_is_counted(engine: sa.Engine) -> None:
    before = refused_claims("postgresql")
    with engine.begin() as c:
        first = claim_period(c, run=Run(token=3))
    with Session(engine) as session, session.begin():
        second = claim_period(session, run=Run(token=4))
    assert first and first.period == "2026-03-01T02:00:00Z"
    assert not second and second.token == 3
    assert refused_claims("postgresql") == before + 1


def test_a_claim_rolled_back_with_its_transaction_leaves_the_period_open(
    engine: sa.Engine,
) -> None:
    with engine.connect() as c:
        assert claim_period(c, run=Run(token=None))
        c.rollback()
    with engine.begin() as c:
        assert claim_period(c, run=Run(token=None))


def test_two_concurrent_claims_of_one_period_let_exactly_one_through(engine: sa.Engine) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(4)

    def claim() -> None:
        with engine.begin() as c:
            barrier.wait()
            results.append(bool(claim_period(c, run=Run(token=None))))

    threads = [threading.Thread(target=claim) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False, False, False, True]


def test_the_successors_upsert_stays_and_the_stale_holders_is_refused_and_counted(
    engine: sa.Engine,
) -> None:
    before = refused_writes("postgresql", "upsert")
    with engine.begin() as c:
        assert fenced_upsert(c, invoices, key=KEY, values={"total": 10}, run=Run(token=5))
    with engine.begin() as c:
        stale = fenced_upsert(c, invoices, key=KEY, values={"total": 99}, run=Run(token=4))
    assert not stale and (stale.token, stale.stored_token) == (4, 5)
    assert stored(engine) == (10, 5)
    assert refused_writes("postgresql", "upsert") == before + 1


def test_the_same_token_may_write_again_and_a_higher_one_overwrites(engine: sa.Engine) -> None:
    with Session(engine) as session, session.begin():
        assert fenced_upsert(session, Invoice, key=KEY, values={"total": 1}, run=Run(token=5))
        assert fenced_upsert(session, Invoice, key=KEY, values={"total": 2}, run=Run(token=5))
        assert fenced_upsert(session, Invoice, key=KEY, values={"total": 3}, run=Run(token=6))
    assert stored(engine) == (3, 6)


def test_a_stale_fence_is_refused_before_its_transaction_writes(engine: sa.Engine) -> None:
    before = refused_writes("postgresql", "fence")
    with engine.begin() as c:
        assert hold_fence(c, "ledger", run=Run(token=7))
    with engine.begin() as c:
        fence = hold_fence(c, "ledger", run=Run(token=6))
    assert not fence and fence.stored_token == 7
    assert refused_writes("postgresql", "fence") == before + 1


def test_a_fence_held_by_an_open_transaction_makes_a_stale_one_wait_then_refuses_it(
    engine: sa.Engine,
) -> None:
    outcome: list[bool] = []
    holder = engine.connect()
    assert hold_fence(holder, "ledger", run=Run(token=8))

    def stale() -> None:
        with engine.begin() as c:
            outcome.append(bool(hold_fence(c, "ledger", run=Run(token=3))))

    thread = threading.Thread(target=stale)
    thread.start()
    thread.join(0.5)
    assert thread.is_alive() and not outcome  # waits on the fence row's lock
    holder.commit()
    holder.close()
    thread.join(10)
    assert outcome == [False]


def test_psycopg_helpers_claim_upsert_and_fence_like_the_sqlalchemy_ones(
    engine: sa.Engine, conn: psycopg.Connection[Any]
) -> None:
    before = refused_writes("postgresql", "upsert")
    assert pg_claim_period(conn, run=Run(token=1))
    assert not pg_claim_period(conn, run=Run(token=2))
    assert pg_fenced_upsert(conn, "invoices", key=KEY, values={"total": 10}, run=Run(token=5))
    stale = pg_fenced_upsert(conn, "invoices", key=KEY, values={"total": 99}, run=Run(token=4))
    assert not stale and stale.stored_token == 5
    assert stored(engine) == (10, 5)
    assert refused_writes("postgresql", "upsert") == before + 1
    assert pg_hold_fence(conn, "ledger", run=Run(token=5))
    assert not pg_hold_fence(conn, "ledger", run=Run(token=4))


def test_a_table_without_the_token_column_is_named(
    engine: sa.Engine, conn: psycopg.Connection[Any]
) -> None:
    with engine.begin() as c, pytest.raises(FencingError, match="'no_token' has no token column"):
        fenced_upsert(c, no_token, key={"id": 1}, values={"total": 1}, run=Run(token=1))
    with pytest.raises(FencingError, match="'no_token' has no token column 'fence_token'"):
        pg_fenced_upsert(conn, "no_token", key={"id": 1}, values={"total": 1}, run=Run(token=1))


def test_a_run_without_a_token_or_with_a_non_integer_one_is_named(engine: sa.Engine) -> None:
    with engine.begin() as c:
        with pytest.raises(FencingError, match=r"has no fencing token \(token=None\)"):
            fenced_upsert(c, invoices, key=KEY, values={"total": 1}, run=Run(token=None))
        with pytest.raises(FencingError, match=r"run.token must be an integer, got '5' \(str\)"):
            hold_fence(c, "ledger", run=Run(token="5"))  # type: ignore[arg-type]
