"""Exactly once in effect: the store a job writes to refuses what a duplicate run would
repeat. Three patterns, each one statement (or one server-side script) in the caller's
transaction, for the stores Python teams write to:

- a per-period run record (`claim_period`): the first run of a period records it under a
  unique key; a second claim is a falsy `Claim`, never an exception;
- a natural key and a fenced upsert (`fenced_upsert`): the row is written only while the
  token it keeps is at most the run's, so a stale holder's write is refused (a falsy
  `Fenced`, counted in `leasecron_fenced_writes_refused_total`);
- a fence for any other write (`hold_fence`): the fence row is raised to the run's token and
  locked until the transaction ends, or refused before anything is written.

    from leasecron.fencing import fenced_upsert

    @scheduler.job("invoices")
    def invoices(ctx: leasecron.JobContext) -> None:
        with Session(engine) as session, session.begin():
            fenced_upsert(session, Invoice, key={"id": 7}, values={"total": 40}, run=ctx)

The helpers by store (claim a period, fenced write, fence for other writes):

- SQLAlchemy 2 (PostgreSQL, SQLite): `claim_period`, `fenced_upsert`, `hold_fence`;
- psycopg 3 (PostgreSQL): `pg_claim_period`, `pg_fenced_upsert`, `pg_hold_fence`;
- redis-py: `redis_claim_period`, `redis_fenced_hset`, `redis_fenced_exec`, and the same
  names with `_async` for `redis.asyncio`.

`run` is a `JobContext`, a guard's `current_run()` or any object with `namespace`, `job`,
`tick` and `token` (`RunLike`). The tables: `DDL` (plain SQL), `fencing_tables(metadata)` and
`create_table_args(name)` (SQLAlchemy and Alembic); docs/how-to/duplicates.md walks through
all of it.

Importing this package needs no driver: each helper imports SQLAlchemy, psycopg or redis-py
when it is first named, and says which extra to install when it is missing
(`pip install 'leasecron[fencing]'`). Nothing here talks to Kubernetes or reads the Lease:
the token the run carries is the whole input.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from leasecron.fencing._outcomes import (
    CLAIMS_REFUSED,
    WRITES_REFUSED,
    Check,
    Claim,
    Fenced,
)
from leasecron.fencing._runs import FencingError, RunLike, RunRef, run_ref
from leasecron.fencing._schema import (
    DDL,
    FENCES_TABLE,
    RUNS_TABLE,
    TOKEN_COLUMN,
    create_table_args,
    ddl_statements,
    fence_token_column,
    fencing_tables,
    token_column_sql,
)

if TYPE_CHECKING:
    from leasecron.fencing._psycopg import pg_claim_period, pg_fenced_upsert, pg_hold_fence
    from leasecron.fencing._redis import (
        redis_claim_period,
        redis_claim_period_async,
        redis_fenced_exec,
        redis_fenced_exec_async,
        redis_fenced_hset,
        redis_fenced_hset_async,
    )
    from leasecron.fencing._sqlalchemy import claim_period, fenced_upsert, hold_fence

_DRIVERS = {
    "pg_": ("_psycopg", "psycopg"),
    "redis_": ("_redis", "redis"),
    "": ("_sqlalchemy", "SQLAlchemy"),
}
"""Where a helper named in `__all__` but not imported above lives, by its name's prefix: its
module, and the package that module needs."""

__all__ = [
    "CLAIMS_REFUSED",
    "DDL",
    "FENCES_TABLE",
    "RUNS_TABLE",
    "TOKEN_COLUMN",
    "WRITES_REFUSED",
    "Check",
    "Claim",
    "Fenced",
    "FencingError",
    "RunLike",
    "RunRef",
    "claim_period",
    "create_table_args",
    "ddl_statements",
    "fence_token_column",
    "fenced_upsert",
    "fencing_tables",
    "hold_fence",
    "pg_claim_period",
    "pg_fenced_upsert",
    "pg_hold_fence",
    "redis_claim_period",
    "redis_claim_period_async",
    "redis_fenced_exec",
    "redis_fenced_exec_async",
    "redis_fenced_hset",
    "redis_fenced_hset_async",
    "run_ref",
    "token_column_sql",
]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, package = next(home for prefix, home in _DRIVERS.items() if name.startswith(prefix))
    try:
        loaded = importlib.import_module(f"{__name__}.{module}")
    except ModuleNotFoundError as e:
        if e.name is None or e.name.split(".")[0] != package.lower():
            raise
        raise ImportError(
            f"leasecron.fencing.{name} needs {package}, which is not installed: "
            f"pip install 'leasecron[fencing]' (or just {package})"
        ) from e
    value = getattr(loaded, name)
    globals()[name] = value
    return value
