"""The checks of an application's table before a fenced upsert, for every driver: the token
column is there and holds integers, every named column exists, the token column is left to
the helper, no column is both key and value. Pure: each driver says what columns the table
has (SQLAlchemy from its `Table`, psycopg from the catalog).

Does not promise that `key` is a primary key or unique constraint: the database says so when
the statement runs.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from leasecron.fencing._runs import FencingError


def check_upsert(
    table: str,
    columns: Mapping[str, str],
    integers: Collection[str],
    *,
    key: Mapping[str, Any],
    values: Mapping[str, Any],
    token_column: str,
) -> None:
    """FencingError naming the first problem. `columns` maps each column of `table` to its
    type's name; `integers` names those of an integer type."""
    if token_column not in columns:
        raise FencingError(
            f"table {table!r} has no token column {token_column!r}: add a BIGINT column "
            f"(leasecron.fencing.token_column_sql({table!r})) or pass token_column= with "
            "the one it has"
        )
    if token_column not in integers:
        raise FencingError(
            f"token column {table}.{token_column} must be an integer type, "
            f"got {columns[token_column]}"
        )
    if not key:
        raise FencingError(f"key must name at least one column of {table!r}, got {{}}")
    for field, names in (("key", key), ("values", values)):
        for name in names:
            if name == token_column:
                raise FencingError(
                    f"{token_column!r} is the token column: the helper writes it, leave it out"
                )
            if name not in columns:
                raise FencingError(f"{field} names {name!r}, not a column of {table!r}")
    both = sorted(set(key) & set(values))
    if both:
        raise FencingError(f"{both[0]!r} is in both key and values; a key is not updated")
