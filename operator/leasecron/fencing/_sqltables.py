"""The SQLAlchemy side of the tables: leasecron's own two `Table` objects as the helpers use
them, an application's table from a `Table` or an ORM class, and its columns handed to the
checks of `_columns` before a fenced upsert. Does not look at the database: a table whose
`Table` object declares the token column but whose database lacks it fails in the statement.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa

from leasecron.fencing._columns import check_upsert
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
    columns = {column.name: str(column.type) for column in table.columns}
    integers = [c.name for c in table.columns if isinstance(c.type, sa.Integer)]
    check_upsert(table.name, columns, integers, key=key, values=values, token_column=token_column)
    return table.c[token_column]
