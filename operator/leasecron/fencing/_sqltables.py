"""The SQLAlchemy side of the tables: leasecron's own two `Table` objects as the helpers use
them, and the checks of an application's table before a fenced upsert (the token column is
there, every named column exists, no column is both key and value).

Owns the errors that name a table and a column. Does not look at the database: a table whose
`Table` object declares the token column but whose database lacks it fails in the statement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from leasecron.fencing._runs import FencingError
from leasecron.fencing._schema import fencing_tables

RUNS, FENCES = fencing_tables(sa.MetaData())


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
    if token_column not in table.c:
        raise FencingError(
            f"table {table.name!r} has no token column {token_column!r}: add a BIGINT "
            f"column (leasecron.fencing.token_column_sql({table.name!r})) or pass "
            "token_column= with the one it has"
        )
    column = table.c[token_column]
    if not isinstance(column.type, sa.Integer):
        raise FencingError(
            f"token column {table.name}.{token_column} must be an integer type, got {column.type}"
        )
    if not key:
        raise FencingError(f"key must name at least one column of {table.name!r}, got {{}}")
    for field, names in (("key", key), ("values", values)):
        for name in names:
            if name not in table.c:
                raise FencingError(f"{field} names {name!r}, not a column of {table.name!r}")
    for name in (*key, *values):
        if name == token_column:
            raise FencingError(
                f"{token_column!r} is the token column: the helper writes it, leave it out"
            )
    both = sorted(set(key) & set(values))
    if both:
        raise FencingError(f"{both[0]!r} is in both key and values; a key is not updated")
    return column
