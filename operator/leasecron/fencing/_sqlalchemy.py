"""The three patterns through SQLAlchemy 2, on PostgreSQL and SQLite: `claim_period`,
`fenced_upsert` and `hold_fence`, each one statement in the caller's transaction (a `Session`,
ORM or not, or a `Connection`).

The check is part of the statement that writes (`INSERT ... ON CONFLICT ... DO UPDATE ...
WHERE stored <= run`), never a read before it: two holders racing cannot both pass it.
Nothing here commits: the caller's transaction decides, so a claim or a fence rolled back
with the rest leaves nothing behind.

Does not promise: other dialects (a FencingError names the dialect); refreshing ORM objects
already loaded in the session (expire them if the same transaction reads them back).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from leasecron.fencing._columns import check_upsert
from leasecron.fencing._outcomes import Check, Claim, Fenced, claim_outcome, write_outcome
from leasecron.fencing._runs import FencingError, RunLike, RunRef, run_ref
from leasecron.fencing._schema import TOKEN_COLUMN, fencing_tables

RUNS, FENCES = fencing_tables(sa.MetaData())
_SHAPES: weakref.WeakKeyDictionary[sa.Table, tuple[dict[str, str], frozenset[str]]] = (
    weakref.WeakKeyDictionary()
)
"""Each table's columns and its integer columns, read once."""


def table_of(table: Any) -> sa.Table:
    """The `Table` of `table`: a `Table` itself or an ORM-mapped class."""
    if isinstance(table, sa.Table):
        return table
    mapped = getattr(table, "__table__", None)
    if isinstance(mapped, sa.Table):
        return mapped
    raise FencingError(f"table must be a sqlalchemy Table or an ORM-mapped class, got {table!r}")


def upsert_columns(
    table: sa.Table,
    *,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    token_column: str,
) -> sa.Column[Any]:
    """Check the columns of a fenced upsert into `table` and return its token column."""
    known = _SHAPES.get(table)
    if known is None:
        columns = {column.name: str(column.type) for column in table.columns}
        integers = frozenset(c.name for c in table.columns if isinstance(c.type, sa.Integer))
        known = _SHAPES[table] = (columns, integers)
    columns, integers = known
    check_upsert(table.name, columns, integers, key=key, values=values, token_column=token_column)
    return table.c[token_column]


Db = Session | sa.Connection
"""Where the statements run: the caller's transaction."""

_INSERTS: dict[str, Callable[[sa.Table], Any]] = {
    "postgresql": postgresql.insert,
    "sqlite": sqlite.insert,
}


def claim_period(db: Db, *, run: RunLike, period: str | None = None) -> Claim:
    """Record that `run` does its job's work for its period (the tick, or `period` when
    given) in `leasecron_runs`, in the caller's transaction. A falsy `Claim` when a run of
    the same period recorded it first (counted); commit with the work, so that a run that
    fails leaves the period open for another."""
    ref = run_ref(run, period=period)
    store, insert = _insert_for(db)
    stmt = (
        insert(RUNS)
        .values(
            namespace=ref.namespace,
            job=ref.job,
            period=ref.period,
            token=ref.token,
            holder=ref.holder,
        )
        .on_conflict_do_nothing(index_elements=["namespace", "job", "period"])
        .returning(RUNS.c.period)
    )
    existing = sa.select(RUNS.c.token).where(
        RUNS.c.namespace == ref.namespace, RUNS.c.job == ref.job, RUNS.c.period == ref.period
    )
    return claim_outcome(
        store,
        ref,
        recorded=db.execute(stmt).first() is not None,
        existing=lambda: db.execute(existing).scalar_one_or_none(),
    )


def fenced_upsert(
    db: Db,
    table: Any,
    *,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    run: RunLike,
    token_column: str = TOKEN_COLUMN,
) -> Fenced:
    """Insert the row `key` + `values` into `table` (a `Table` or an ORM class), or update
    the row with that `key`, only when the token stored in its `token_column` is at most the
    run's: one statement. A falsy `Fenced` when a later holder wrote the row (counted); the
    row is then left as that holder wrote it. `key` names the columns of a primary key or
    unique constraint; every name is a column name."""
    ref = run_ref(run)
    token = ref.fenced("fenced_upsert")
    target = table_of(table)
    stored = upsert_columns(target, key=key, values=values, token_column=token_column)
    store, insert = _insert_for(db)
    stmt = insert(target).values({**key, **values, token_column: token})
    updates = {name: stmt.excluded[name] for name in values}
    updates[token_column] = stmt.excluded[token_column]
    stmt = stmt.on_conflict_do_update(
        index_elements=list(key),
        set_=updates,
        where=stored <= stmt.excluded[token_column],
    ).returning(stored)
    current = sa.select(stored).where(*(target.c[name] == value for name, value in key.items()))
    return _write_outcome(db, stmt, current, store=store, ref=ref, check=Check.UPSERT)


def hold_fence(db: Db, name: str, *, run: RunLike) -> Fenced:
    """Raise the fence `name` to the run's token and lock it until the caller's transaction
    ends, unless it has seen a higher token: a falsy `Fenced` then (counted), and the caller
    must not write. Guards any other write of the same transaction: a stale holder is
    refused before it commits, and a later holder's fence waits for it (PostgreSQL locks
    the row; SQLite has one writer at a time)."""
    ref = run_ref(run)
    token = ref.fenced("hold_fence")
    if not isinstance(name, str) or not name:
        raise FencingError(f"fence name must be a non-empty string, got {name!r}")
    store, insert = _insert_for(db)
    stmt = insert(FENCES).values(name=name, token=token)
    stmt = stmt.on_conflict_do_update(
        index_elements=["name"],
        set_={"token": stmt.excluded.token, "updated_at": sa.func.current_timestamp()},
        where=FENCES.c.token <= stmt.excluded.token,
    ).returning(FENCES.c.token)
    current = sa.select(FENCES.c.token).where(FENCES.c.name == name)
    return _write_outcome(db, stmt, current, store=store, ref=ref, check=Check.FENCE)


def _write_outcome(
    db: Db, stmt: Any, current: sa.Select[Any], *, store: str, ref: RunRef, check: Check
) -> Fenced:
    """Run the fenced write `stmt`; when the store refused it, read its token (`current`)."""
    return write_outcome(
        store,
        ref,
        check,
        written=db.execute(stmt).first() is not None,
        stored=lambda: db.execute(current).scalar_one_or_none(),
    )


def _insert_for(db: Db) -> tuple[str, Callable[[sa.Table], Any]]:
    bind = db.get_bind() if isinstance(db, Session) else db
    dialect = bind.dialect.name
    try:
        return dialect, _INSERTS[dialect]
    except KeyError:
        raise FencingError(
            f"the database's dialect must be postgresql or sqlite, got {dialect!r}"
        ) from None
