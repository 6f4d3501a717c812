"""leasecron.fencing on SQLite through SQLAlchemy (the demo's embedded default): the same
statements as on PostgreSQL, checked on a database file of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from fencing_helpers import Run, invoices, metadata, no_token, refused_claims, refused_writes

from leasecron.fencing import FencingError, claim_period, fenced_upsert, fencing_tables, hold_fence

KEY = {"customer": "acme", "month": "2026-03"}


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[sa.Engine]:
    made = sa.create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    fencing_tables(metadata)
    metadata.create_all(made)
    yield made
    made.dispose()


def test_a_second_claim_of_a_period_is_refused_and_counted(engine: sa.Engine) -> None:
    before = refused_claims("sqlite")
    with engine.begin() as c:
        assert claim_period(c, run=Run(token=None))
    with engine.begin() as c:
        assert not claim_period(c, run=Run(token=2))
    assert refused_claims("sqlite") == before + 1


def test_a_stale_upsert_and_a_stale_fence_are_refused_and_counted(engine: sa.Engine) -> None:
    before = refused_writes("sqlite", "upsert"), refused_writes("sqlite", "fence")
    with engine.begin() as c:
        assert fenced_upsert(c, invoices, key=KEY, values={"total": 10}, run=Run(token=5))
        assert hold_fence(c, "ledger", run=Run(token=5))
    with engine.begin() as c:
        stale = fenced_upsert(c, invoices, key=KEY, values={"total": 99}, run=Run(token=4))
        fence = hold_fence(c, "ledger", run=Run(token=4))
    assert not stale and stale.stored_token == 5
    assert not fence and fence.stored_token == 5
    with engine.connect() as c:
        assert c.execute(sa.select(invoices.c.total, invoices.c.fence_token)).one() == (10, 5)
    after = refused_writes("sqlite", "upsert"), refused_writes("sqlite", "fence")
    assert after == (before[0] + 1, before[1] + 1)


def test_a_table_without_the_token_column_is_named(engine: sa.Engine) -> None:
    with engine.begin() as c, pytest.raises(FencingError, match="'no_token' has no token column"):
        fenced_upsert(c, no_token, key={"id": 1}, values={"total": 1}, run=Run(token=1))
