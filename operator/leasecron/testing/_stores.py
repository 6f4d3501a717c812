"""Real PostgreSQL and Redis servers for tests of handlers that write to them, beside the
control-plane fixtures of `leasecron.testing.pytest_plugin` (which offers these as the
`postgres_server` / `postgres_database` and `redis_server` / `redis_database` fixtures).

One server of each per session, started the first time a test asks for it, on a free port on
127.0.0.1, its files in a temporary directory removed at the end: PostgreSQL through
pytest-postgresql's executor and janitor (a database per test, created and dropped), Redis
through pytest-redis's executor (the database flushed before each test). As root, PostgreSQL
runs as the `postgres` user (or `nobody`): it refuses to run as root. The servers come from
the Debian packages `postgresql` and `redis-server` (e2e/stores/host-packages.sh).

Does not promise durability (fsync is off) or any tuning beyond what a test needs.
"""

from __future__ import annotations

import glob
import os
import pwd
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

if TYPE_CHECKING:
    import psycopg
    import redis
    import redis.asyncio

HOST = "127.0.0.1"
PG_USER = "postgres"
PG_OPTIONS = "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"


class StoreMissingError(RuntimeError):
    """The server's program or its Python package is not installed (the message says which,
    and how to install it)."""


@dataclass(frozen=True)
class PostgresServer:
    """A running PostgreSQL: `host`, `port`, superuser `user` (no password)."""

    host: str
    port: int
    user: str

    def database(self, dbname: str) -> PostgresDatabase:
        return PostgresDatabase(host=self.host, port=self.port, user=self.user, dbname=dbname)


@dataclass(frozen=True)
class PostgresDatabase:
    """One database of a `PostgresServer`: `url` for SQLAlchemy (psycopg 3 driver), `dsn`
    for psycopg, `connect()` for a new psycopg connection."""

    host: str
    port: int
    user: str
    dbname: str

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{self.user}@{self.host}:{self.port}/{self.dbname}"

    @property
    def dsn(self) -> str:
        return f"host={self.host} port={self.port} user={self.user} dbname={self.dbname}"

    def connect(self, **kwargs: Any) -> psycopg.Connection[Any]:
        import psycopg

        return psycopg.connect(self.dsn, **kwargs)


@dataclass(frozen=True)
class RedisServer:
    """A running redis-server: `host`, `port`, `url(db)`, `client(db)`."""

    host: str
    port: int

    def url(self, db: int = 0) -> str:
        return f"redis://{self.host}:{self.port}/{db}"

    def client(self, db: int = 0, **kwargs: Any) -> redis.Redis:
        import redis

        return redis.Redis(host=self.host, port=self.port, db=db, **kwargs)


@dataclass(frozen=True)
class RedisDatabase:
    """One numbered database of a `RedisServer`, empty when the test starts: `url`,
    `client()` (a sync `redis.Redis`), `async_client()` (a `redis.asyncio.Redis`)."""

    host: str
    port: int
    db: int

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/{self.db}"

    def client(self, **kwargs: Any) -> redis.Redis:
        import redis

        return redis.Redis(host=self.host, port=self.port, db=self.db, **kwargs)

    def async_client(self, **kwargs: Any) -> redis.asyncio.Redis:
        import redis.asyncio

        return redis.asyncio.Redis(host=self.host, port=self.port, db=self.db, **kwargs)


@contextmanager
def postgres_server(*, options: str = PG_OPTIONS) -> Iterator[PostgresServer]:
    """Start a PostgreSQL server for the duration of the block; `options` are passed to
    `postgres` (the default turns fsync off: tests need no durability; "" keeps it)."""
    pg_ctl = _pg_ctl()
    _require("pytest_postgresql", "pytest-postgresql")
    from pytest_postgresql.executors.proc import PostgreSQLExecutor

    from leasecron.testing._processes import free_port

    workdir = Path(tempfile.mkdtemp(prefix="leasecron-postgres-"))
    try:
        executable = _unprivileged(pg_ctl, workdir)
        executor = PostgreSQLExecutor(
            executable=executable,
            host=HOST,
            port=free_port(),
            datadir=str(workdir / "data"),
            unixsocketdir=str(workdir),
            logfile=str(workdir / "postgresql.log"),
            startparams="-w",
            dbname="leasecron",
            user=PG_USER,
            postgres_options=options,
        )
        with executor:
            yield PostgresServer(host=HOST, port=int(executor.port), user=PG_USER)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@contextmanager
def postgres_database(server: PostgresServer, name: str) -> Iterator[PostgresDatabase]:
    """Create a database named after `name` (made a valid, unique identifier), drop it after
    the block (closing what is still connected)."""
    from pytest_postgresql.janitor import DatabaseJanitor

    dbname = _dbname(name)
    janitor = DatabaseJanitor(user=server.user, host=server.host, port=server.port, dbname=dbname)
    with janitor:
        yield server.database(dbname)


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    """Start a redis-server for the duration of the block."""
    executable = shutil.which("redis-server")
    if executable is None:
        raise StoreMissingError(
            "redis-server is not installed (Debian package redis-server; "
            "e2e/stores/host-packages.sh installs it)"
        )
    _require("pytest_redis", "pytest-redis")
    from pytest_redis.executor.process import RedisExecutor

    from leasecron.testing._processes import free_port

    workdir = Path(tempfile.mkdtemp(prefix="leasecron-redis-"))
    try:
        executor = RedisExecutor(
            executable=executable,
            databases=16,
            redis_timeout=30,
            loglevel="warning",
            host=HOST,
            port=free_port(),
            datadir=workdir,
        )
        with executor:
            yield RedisServer(host=HOST, port=int(executor.port))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _pg_ctl() -> str:
    found = shutil.which("pg_ctl") or max(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda path: int(path.split("/")[4]),
        default=None,
    )
    if found is None:
        raise StoreMissingError(
            "PostgreSQL is not installed: no pg_ctl (Debian package postgresql; "
            "e2e/stores/host-packages.sh installs it)"
        )
    return found


def _unprivileged(pg_ctl: str, workdir: Path) -> str:
    """`pg_ctl`, or as root a wrapper that runs it as an unprivileged user who owns
    `workdir`."""
    if os.geteuid() != 0:
        return pg_ctl
    for user in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(user)
            break
        except KeyError:
            continue
    else:
        raise StoreMissingError("running as root, and there is no postgres or nobody user")
    os.chown(workdir, entry.pw_uid, entry.pw_gid)
    wrapper = workdir / "pg_ctl"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"exec setpriv --reuid={entry.pw_uid} --regid={entry.pw_gid} --clear-groups "
        f'-- "{pg_ctl}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper)


_COUNT = iter(range(1, 1_000_000))


def _dbname(name: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")[:40]
    return f"t{next(_COUNT)}_{slug}"


def _require(module: str, package: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise StoreMissingError(
            f"{package} is not installed (the fixtures start servers with it): "
            f"pip install {package}"
        )


# The fixtures; leasecron.testing.pytest_plugin registers them under the names given.

T = TypeVar("T")


def _started(manager: AbstractContextManager[T]) -> Iterator[T]:
    with ExitStack() as stack:
        try:
            value = stack.enter_context(manager)
        except StoreMissingError as e:
            pytest.skip(str(e))
        yield value


@pytest.fixture(scope="session", name="postgres_server")
def postgres_server_fixture() -> Iterator[PostgresServer]:
    """The session's PostgreSQL server (`host`, `port`, `user`), started on first use;
    skipped, naming what is missing, where PostgreSQL is not installed."""
    yield from _started(postgres_server())


@pytest.fixture(name="postgres_database")
def postgres_database_fixture(
    request: pytest.FixtureRequest, postgres_server: PostgresServer
) -> Iterator[PostgresDatabase]:
    """A fresh database of the session's PostgreSQL for this test only, dropped after it:
    `.url` for SQLAlchemy (`create_engine(postgres_database.url)`), `.dsn` and `.connect()`
    for psycopg."""
    with postgres_database(postgres_server, request.node.name) as database:
        yield database


@pytest.fixture(scope="session", name="redis_server")
def redis_server_fixture() -> Iterator[RedisServer]:
    """The session's redis-server (`host`, `port`), started on first use; skipped, naming
    what is missing, where redis-server is not installed."""
    yield from _started(redis_server())


@pytest.fixture(name="redis_database")
def redis_database_fixture(redis_server: RedisServer) -> Iterator[RedisDatabase]:
    """Database 0 of the session's redis-server, flushed before this test: `.url`,
    `.client()`, `.async_client()`."""
    database = RedisDatabase(host=redis_server.host, port=redis_server.port, db=0)
    with database.client() as client:
        client.flushdb()
    yield database
