"""The tables the fencing helpers write, as plain SQL (for PostgreSQL and SQLite alike) and as
SQLAlchemy `Table` objects (for `MetaData.create_all`, Alembic's autogenerate, or
`op.create_table(*create_table_args(...))` in a migration).

Two tables belong to leasecron: `leasecron_runs`, one record per (namespace, job, period)
under a primary key, and `leasecron_fences`, the highest token each named fence has seen. A
table of the application written with `fenced_upsert` needs one more column, a BIGINT
`fence_token` (`token_column_sql` and `fence_token_column` give it).

Owns the table and column names. Does not create anything by itself: the application runs
the DDL or its migration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy import Column, MetaData, Table

RUNS_TABLE = "leasecron_runs"
FENCES_TABLE = "leasecron_fences"
TOKEN_COLUMN = "fence_token"

DDL = f"""\
CREATE TABLE IF NOT EXISTS {RUNS_TABLE} (
    namespace   TEXT NOT NULL,
    job         TEXT NOT NULL,
    period      TEXT NOT NULL,
    token       BIGINT,
    holder      TEXT,
    claimed_at  TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (namespace, job, period)
);
CREATE TABLE IF NOT EXISTS {FENCES_TABLE} (
    name        TEXT NOT NULL PRIMARY KEY,
    token       BIGINT NOT NULL,
    updated_at  TIMESTAMP WITH TIME ZONE NOT NULL DEFAULT CURRENT_TIMESTAMP
);
"""
"""Both tables, for PostgreSQL and SQLite (statements separated by `;`)."""


def ddl_statements() -> list[str]:
    """`DDL` split into single statements, for drivers that run one at a time."""
    return [part.strip() for part in DDL.split(";") if part.strip()]


def token_column_sql(table: str, column: str = TOKEN_COLUMN) -> str:
    """The statement that adds the token column to an existing table of the application
    (rows written before it count as token 0, so any run may overwrite them)."""
    return f"ALTER TABLE {table} ADD COLUMN {column} BIGINT NOT NULL DEFAULT 0"


def fence_token_column(name: str = TOKEN_COLUMN) -> Column[int]:
    """A fresh SQLAlchemy `Column` for the token, to put in an application's `Table`
    (an ORM model declares `fence_token: Mapped[int] = mapped_column(BigInteger)`)."""
    import sqlalchemy as sa

    return sa.Column(name, sa.BigInteger, nullable=False, server_default="0")


def _now_column(name: str) -> Column[Any]:
    """A timestamp column the database sets to the time of the write."""
    import sqlalchemy as sa

    return sa.Column(
        name, sa.DateTime(timezone=True), nullable=False, server_default=sa.func.current_timestamp()
    )


def _runs_columns() -> list[Column[Any]]:
    import sqlalchemy as sa

    return [
        sa.Column("namespace", sa.Text, primary_key=True),
        sa.Column("job", sa.Text, primary_key=True),
        sa.Column("period", sa.Text, primary_key=True),
        sa.Column("token", sa.BigInteger, nullable=True),
        sa.Column("holder", sa.Text, nullable=True),
        _now_column("claimed_at"),
    ]


def _fences_columns() -> list[Column[Any]]:
    import sqlalchemy as sa

    return [
        sa.Column("name", sa.Text, primary_key=True),
        sa.Column("token", sa.BigInteger, nullable=False),
        _now_column("updated_at"),
    ]


_COLUMNS = {RUNS_TABLE: _runs_columns, FENCES_TABLE: _fences_columns}


def create_table_args(name: str) -> tuple[Any, ...]:
    """The arguments of Alembic's `op.create_table` for one of the two tables, built fresh on
    every call: `op.create_table(*create_table_args("leasecron_runs"))`."""
    try:
        columns = _COLUMNS[name]
    except KeyError:
        raise ValueError(f"name must be {RUNS_TABLE!r} or {FENCES_TABLE!r}, got {name!r}") from None
    return (name, *columns())


def fencing_tables(metadata: MetaData) -> tuple[Table, Table]:
    """`leasecron_runs` and `leasecron_fences` as `Table` objects in the application's
    `metadata` (so `metadata.create_all(engine)` and Alembic's autogenerate see them)."""
    import sqlalchemy as sa

    made = {}
    for name, columns in _COLUMNS.items():
        existing = metadata.tables.get(name)
        made[name] = existing if existing is not None else sa.Table(name, metadata, *columns())
    runs, fences = made[RUNS_TABLE], made[FENCES_TABLE]
    return runs, fences
