"""`leasecron bench fencing`: the price of the token check. Fenced upserts
(`leasecron.fencing.fenced_upsert`, `pg_fenced_upsert`) against the same upserts without the
check, on the same PostgreSQL, through SQLAlchemy and through psycopg; writes per second,
each write its own transaction (a job's usual shape), most of them updates of existing rows.

The methods take turns in short rounds so that drift on a shared machine hits them alike;
the rates are the median round, the fenced / plain ratio the median of each round's own
ratio (a paired comparison, steadier than the ratio of the medians). A throwaway server is
started (`leasecron.testing._stores`, durable by default: fsync on) unless `url` names one
(a SQLAlchemy URL with the psycopg driver; the bench creates and drops its own table there).
Does not measure contention between holders: one client writes.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from leasecron.bench._clusters import progress
from leasecron.bench._processes import BenchError
from leasecron.bench._stats import show, table

TABLE = "bench_fenced_invoices"
CUSTOMERS = 100


@dataclass(frozen=True)
class _Run:
    token: int
    namespace: str = "bench"
    job: str = "fencing"
    tick: datetime = datetime(2026, 1, 1, tzinfo=UTC)


@contextlib.contextmanager
def _database(url: str | None, *, durable: bool) -> Iterator[str]:
    if url is not None:
        yield url
        return
    from leasecron.testing._stores import PG_OPTIONS, StoreMissingError, postgres_server

    try:
        with postgres_server(options="" if durable else PG_OPTIONS) as server:
            progress(
                f"PostgreSQL on {server.host}:{server.port} (fsync {'on' if durable else 'off'})"
            )
            yield server.database("postgres").url
    except StoreMissingError as e:
        raise BenchError(str(e)) from e


Method = Callable[[int], None]
PLAIN_SQL = (
    f"INSERT INTO {TABLE} (customer, total, fence_token) VALUES (%s, %s, %s) "
    "ON CONFLICT (customer) DO UPDATE SET total = EXCLUDED.total, "
    "fence_token = EXCLUDED.fence_token"
)
CHECKED_SQL = PLAIN_SQL + (
    f" WHERE {TABLE}.fence_token <= EXCLUDED.fence_token RETURNING {TABLE}.fence_token"
)
"""The fenced statement written by hand: the check's price in the database alone."""


def _methods(url: str) -> tuple[dict[str, Method], Callable[[], None]]:
    """Each method writes row `i % CUSTOMERS` in its own transaction; and a closer."""
    import psycopg
    import sqlalchemy as sa

    from leasecron.fencing import fence_token_column

    engine = sa.create_engine(url)
    table = sa.Table(
        TABLE,
        sa.MetaData(),
        sa.Column("customer", sa.Text, primary_key=True),
        sa.Column("total", sa.Integer, nullable=False),
        fence_token_column(),
    )
    with engine.begin() as c:
        table.drop(c, checkfirst=True)
        table.create(c)
    dsn = engine.url.set(drivername="postgresql").render_as_string(hide_password=False)
    conn = psycopg.connect(dsn, autocommit=False)

    def close() -> None:
        conn.close()
        with engine.begin() as c:
            table.drop(c)
        engine.dispose()

    return {**_sqlalchemy_methods(engine, table), **_psycopg_methods(conn)}, close


def _sqlalchemy_methods(engine: Any, table: Any) -> dict[str, Method]:
    from sqlalchemy.dialects.postgresql import insert

    from leasecron.fencing import fenced_upsert

    run = _Run(token=1)

    def sqlalchemy_plain(i: int) -> None:
        stmt = insert(table).values(customer=f"c{i % CUSTOMERS}", total=i, fence_token=1)
        stmt = stmt.on_conflict_do_update(
            index_elements=["customer"],
            set_={"total": stmt.excluded.total, "fence_token": stmt.excluded.fence_token},
        )
        with engine.begin() as c:
            c.execute(stmt)

    def sqlalchemy_fenced(i: int) -> None:
        key = {"customer": f"c{i % CUSTOMERS}"}
        with engine.begin() as c:
            fenced_upsert(c, table, key=key, values={"total": i}, run=run)

    return {"sqlalchemy_plain": sqlalchemy_plain, "sqlalchemy_fenced": sqlalchemy_fenced}


def _psycopg_methods(conn: Any) -> dict[str, Method]:
    from leasecron.fencing import pg_fenced_upsert

    run = _Run(token=1)

    def psycopg_plain(i: int) -> None:
        with conn.transaction():
            conn.execute(PLAIN_SQL, (f"c{i % CUSTOMERS}", i, 1))

    def psycopg_checked_sql(i: int) -> None:
        with conn.transaction():
            conn.execute(CHECKED_SQL, (f"c{i % CUSTOMERS}", i, 1)).fetchone()

    def psycopg_fenced(i: int) -> None:
        key = {"customer": f"c{i % CUSTOMERS}"}
        with conn.transaction():
            pg_fenced_upsert(conn, TABLE, key=key, values={"total": i}, run=run)

    return {
        "psycopg_plain": psycopg_plain,
        "psycopg_checked_sql": psycopg_checked_sql,
        "psycopg_fenced": psycopg_fenced,
    }


def run_fencing_bench(
    *, writes: int, rounds: int, url: str | None, durable: bool, json_output: bool
) -> dict[str, Any]:
    """Measure, print the table (and the JSON last with `json_output`); the figures."""
    if writes < 1 or rounds < 1:
        raise ValueError(f"--writes and --rounds must be >= 1, got {writes}, {rounds}")
    with _database(url, durable=durable) as target:
        methods, close = _methods(target)
        try:
            for method in methods.values():  # warm up: connections, prepared plans, catalog
                for i in range(min(writes, 200)):
                    method(i)
            rates: dict[str, list[float]] = {name: [] for name in methods}
            for round_ in range(rounds):
                for name, method in methods.items():
                    began = time.perf_counter()
                    for i in range(writes):
                        method(i)
                    rates[name].append(writes / (time.perf_counter() - began))
                progress(f"round {round_ + 1}/{rounds} done")
        finally:
            close()
    per_second = {name: round(statistics.median(values), 1) for name, values in rates.items()}
    figures: dict[str, Any] = {
        "writes_per_round": writes,
        "rounds": rounds,
        "durable": durable,
        "writes_per_second": per_second,
        "fenced_vs_plain": {
            "sqlalchemy_fenced": _paired(rates, "sqlalchemy_fenced", "sqlalchemy_plain"),
            "psycopg_fenced": _paired(rates, "psycopg_fenced", "psycopg_plain"),
            "psycopg_checked_sql": _paired(rates, "psycopg_checked_sql", "psycopg_plain"),
        },
    }
    rows = [(name, show(rate), "") for name, rate in per_second.items()]
    rows += [
        (f"{name} / its plain upsert", show(ratio), "close to 1")
        for name, ratio in figures["fenced_vs_plain"].items()
    ]
    print(table(rows, title="leasecron bench fencing: upserts per second, one per transaction"))
    if json_output:
        print(json.dumps(figures), flush=True)
    return figures


def _paired(rates: dict[str, list[float]], method: str, baseline: str) -> float:
    """The median over rounds of `method`'s rate / `baseline`'s rate in the same round."""
    ratios = [a / b for a, b in zip(rates[method], rates[baseline], strict=True)]
    return round(statistics.median(ratios), 3)
