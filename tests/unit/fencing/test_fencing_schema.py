"""The tables as plain SQL and as SQLAlchemy objects, the checks of an application's table
before a fenced upsert, and the package importable without its drivers."""

from __future__ import annotations

import subprocess
import sys

import pytest
import sqlalchemy as sa

from leasecron.fencing import (
    DDL,
    FencingError,
    create_table_args,
    ddl_statements,
    fence_token_column,
    fencing_tables,
    token_column_sql,
)
from leasecron.fencing._sqlalchemy import table_of, upsert_columns

metadata = sa.MetaData()
invoices = sa.Table(
    "invoices",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("total", sa.Integer),
    sa.Column("note", sa.Text),
    fence_token_column(),
)


def test_the_plain_ddl_creates_both_tables_keyed_as_the_helpers_expect() -> None:
    runs, fences = ddl_statements()
    assert "PRIMARY KEY (namespace, job, period)" in runs
    assert fences.startswith("CREATE TABLE IF NOT EXISTS leasecron_fences")
    assert DDL.count("CREATE TABLE") == 2
    assert token_column_sql("invoices") == (
        "ALTER TABLE invoices ADD COLUMN fence_token BIGINT NOT NULL DEFAULT 0"
    )


def test_the_alembic_arguments_are_fresh_columns_each_call() -> None:
    name, *columns = create_table_args("leasecron_runs")
    again = create_table_args("leasecron_runs")[1:]
    assert name == "leasecron_runs"
    assert [c.name for c in columns] == [
        "namespace",
        "job",
        "period",
        "token",
        "holder",
        "claimed_at",
    ]
    assert all(a is not b for a, b in zip(columns, again, strict=True))
    with pytest.raises(ValueError, match="got 'runs'"):
        create_table_args("runs")


def test_fencing_tables_join_an_applications_metadata_once() -> None:
    mine = sa.MetaData()
    first = fencing_tables(mine)
    assert fencing_tables(mine) == first
    assert set(mine.tables) == {"leasecron_runs", "leasecron_fences"}


def test_an_upsert_into_a_table_without_the_token_column_is_named() -> None:
    plain = sa.Table("plain", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True))
    with pytest.raises(FencingError, match="table 'plain' has no token column 'fence_token'"):
        upsert_columns(plain, key={"id": 1}, values={}, token_column="fence_token")


@pytest.mark.parametrize(
    ("key", "values", "message"),
    [
        ({}, {"total": 1}, "key must name at least one column"),
        ({"nope": 1}, {"total": 1}, "key names 'nope', not a column of 'invoices'"),
        ({"id": 1}, {"fence_token": 3}, "'fence_token' is the token column"),
        ({"id": 1}, {"id": 2}, "'id' is in both key and values"),
    ],
)
def test_bad_columns_are_named(key: dict[str, int], values: dict[str, int], message: str) -> None:
    with pytest.raises(FencingError, match=message):
        upsert_columns(invoices, key=key, values=values, token_column="fence_token")


def test_a_token_column_that_is_not_an_integer_is_named() -> None:
    table = sa.Table("t", sa.MetaData(), sa.Column("id", sa.Integer), sa.Column("tok", sa.Text))
    with pytest.raises(FencingError, match=r"token column t\.tok must be an integer type"):
        upsert_columns(table, key={"id": 1}, values={}, token_column="tok")


def test_only_tables_and_mapped_classes_are_tables() -> None:
    assert table_of(invoices) is invoices
    with pytest.raises(FencingError, match="got 'invoices'"):
        table_of("invoices")


def test_the_package_imports_without_drivers_and_names_the_extra_when_one_is_used() -> None:
    script = (
        "import sys\n"
        "for name in ('sqlalchemy', 'psycopg', 'redis'): sys.modules[name] = None\n"
        "import leasecron.fencing as f\n"
        "print(f.DDL.count('CREATE'))\n"
        "try:\n"
        "    f.redis_fenced_hset\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.splitlines() == [
        "2",
        "leasecron.fencing.redis_fenced_hset needs redis, which is not installed: "
        "pip install 'leasecron[fencing]' (or just redis)",
    ]
