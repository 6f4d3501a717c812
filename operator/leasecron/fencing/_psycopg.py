"""The three patterns through psycopg 3 on PostgreSQL, without SQLAlchemy: `pg_claim_period`,
`pg_fenced_upsert` and `pg_hold_fence`, the same statements as `leasecron.fencing`'s
SQLAlchemy helpers, in the caller's transaction on a `psycopg.Connection`.

Owns the SQL as psycopg composes it (identifiers quoted by `psycopg.sql`) and a look at the
catalog, once per connection and table, so that a table without the token column is named
before anything is written. Nothing here commits.

Does not promise: a `psycopg.AsyncConnection` (run these in `conn.run_sync`-style code or
use SQLAlchemy's async session with `run_sync`).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import psycopg
from psycopg import sql

from leasecron.fencing._columns import check_upsert
from leasecron.fencing._outcomes import Check, Claim, Fenced, claim_outcome, write_outcome
from leasecron.fencing._runs import FencingError, RunLike, run_ref
from leasecron.fencing._schema import FENCES_TABLE, RUNS_TABLE, TOKEN_COLUMN

STORE = "postgresql"
_INTEGER_TYPES = frozenset({"bigint", "integer", "smallint"})
_COLUMNS: weakref.WeakKeyDictionary[
    psycopg.Connection[Any], dict[str, tuple[dict[str, str], frozenset[str]]]
] = weakref.WeakKeyDictionary()

_STATEMENTS: weakref.WeakKeyDictionary[
    psycopg.Connection[Any], dict[tuple[str, tuple[str, ...], tuple[str, ...], str], str]
] = weakref.WeakKeyDictionary()

_CLAIM = sql.SQL(
    "INSERT INTO {runs} (namespace, job, period, token, holder) VALUES (%s, %s, %s, %s, %s) "
    "ON CONFLICT (namespace, job, period) DO NOTHING RETURNING period"
).format(runs=sql.Identifier(RUNS_TABLE))
_CLAIMED_TOKEN = sql.SQL(
    "SELECT token FROM {runs} WHERE namespace = %s AND job = %s AND period = %s"
).format(runs=sql.Identifier(RUNS_TABLE))
_FENCE = sql.SQL(
    "INSERT INTO {fences} AS f (name, token) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE "
    "SET token = EXCLUDED.token, updated_at = CURRENT_TIMESTAMP "
    "WHERE f.token <= EXCLUDED.token RETURNING token"
).format(fences=sql.Identifier(FENCES_TABLE))
_FENCE_TOKEN = sql.SQL("SELECT token FROM {fences} WHERE name = %s").format(
    fences=sql.Identifier(FENCES_TABLE)
)


def pg_claim_period(
    conn: psycopg.Connection[Any], *, run: RunLike, period: str | None = None
) -> Claim:
    """`claim_period` on a psycopg connection: a falsy `Claim` when the period's run
    record exists already (counted)."""
    ref = run_ref(run, period=period)
    row = conn.execute(_CLAIM, (ref.namespace, ref.job, ref.period, ref.token, ref.holder))
    return claim_outcome(
        STORE,
        ref,
        recorded=row.fetchone() is not None,
        existing=lambda: _first(conn, _CLAIMED_TOKEN, (ref.namespace, ref.job, ref.period)),
    )


def pg_fenced_upsert(
    conn: psycopg.Connection[Any],
    table: str,
    *,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    run: RunLike,
    token_column: str = TOKEN_COLUMN,
) -> Fenced:
    """`fenced_upsert` on a psycopg connection; `table` is a name, `"schema.table"` too."""
    ref = run_ref(run)
    token = ref.fenced("pg_fenced_upsert")
    columns, integers = _columns(conn, table)
    check_upsert(table, columns, integers, key=key, values=values, token_column=token_column)
    stmt = _upsert_sql(conn, table, tuple(key), tuple(values), token_column)
    row = conn.execute(stmt, [*key.values(), *values.values(), token]).fetchone()

    def current() -> Any:
        name, tok = sql.Identifier(*table.split(".")), sql.Identifier(token_column)
        where = sql.SQL(" AND ").join(sql.SQL("{c} = %s").format(c=sql.Identifier(c)) for c in key)
        query = sql.SQL("SELECT {tok} FROM {table} WHERE {where}")
        return _first(conn, query.format(tok=tok, table=name, where=where), list(key.values()))

    return write_outcome(STORE, ref, Check.UPSERT, written=row is not None, stored=current)


def pg_hold_fence(conn: psycopg.Connection[Any], name: str, *, run: RunLike) -> Fenced:
    """`hold_fence` on a psycopg connection: the fence row is locked until the transaction
    ends; a falsy `Fenced` (counted) when a higher token holds it."""
    ref = run_ref(run)
    token = ref.fenced("pg_hold_fence")
    if not isinstance(name, str) or not name:
        raise FencingError(f"fence name must be a non-empty string, got {name!r}")
    return write_outcome(
        STORE,
        ref,
        Check.FENCE,
        written=conn.execute(_FENCE, (name, token)).fetchone() is not None,
        stored=lambda: _first(conn, _FENCE_TOKEN, (name,)),
    )


def _first(conn: psycopg.Connection[Any], query: sql.Composed, params: Sequence[Any]) -> Any:
    """The first column of `query`'s first row, None when it has none."""
    row = conn.execute(query, params).fetchone()
    return row[0] if row else None


def _upsert_sql(
    conn: psycopg.Connection[Any],
    table: str,
    key: tuple[str, ...],
    values: tuple[str, ...],
    token_column: str,
) -> str:
    """The upsert's text, composed once per connection and column set (psycopg then
    prepares it like any repeated query)."""
    statements = _STATEMENTS.setdefault(conn, {})
    shape = (table, key, values, token_column)
    if shape not in statements:
        tok = sql.Identifier(token_column)
        columns = [*key, *values, token_column]
        updates = [
            sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c))
            for c in (*values, token_column)
        ]
        statements[shape] = (
            sql.SQL(
                "INSERT INTO {table} AS t ({columns}) VALUES ({params}) ON CONFLICT ({key}) "
                "DO UPDATE SET {updates} WHERE t.{tok} <= EXCLUDED.{tok} RETURNING t.{tok}"
            )
            .format(
                table=sql.Identifier(*table.split(".")),
                columns=sql.SQL(", ").join(map(sql.Identifier, columns)),
                params=sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                key=sql.SQL(", ").join(map(sql.Identifier, key)),
                updates=sql.SQL(", ").join(updates),
                tok=tok,
            )
            .as_string(conn)
        )
    return statements[shape]


def _columns(conn: psycopg.Connection[Any], table: str) -> tuple[dict[str, str], frozenset[str]]:
    """`table`'s column name -> type, and its integer columns, read from the catalog once per
    connection."""
    known = _COLUMNS.setdefault(conn, {})
    if table not in known:
        rows = conn.execute(
            "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute "
            "WHERE attrelid = to_regclass(%s) AND attnum > 0 AND NOT attisdropped",
            (table,),
        ).fetchall()
        if not rows:
            raise FencingError(f"table {table!r} does not exist (or has no columns)")
        columns = {str(name): str(kind) for name, kind in rows}
        integers = frozenset(n for n, kind in columns.items() if kind in _INTEGER_TYPES)
        known[table] = (columns, integers)
    return known[table]
