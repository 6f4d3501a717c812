"""Exactly once in effect, proven against real stores: a holder SIGSTOPped past its grant and
its successor both bill the same invoices on every store (PostgreSQL through SQLAlchemy and
psycopg, SQLite, Redis): the successor's writes stay, the stale holder's are refused and
counted in its process. And with the Lease protocol bypassed (two replicas run the same tick
unguarded), the per-period record lets one reminder out per store."""

from __future__ import annotations

import json
import queue
import signal
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fencing_effects import Stores, bill, create_tables, stored_totals
from kubernetes.client import ApiClient

from leasecron.kube.clients import Kube
from leasecron.runtime import Guard, close_guards
from leasecron.testing import ChildProcess
from leasecron.testing._polling import poll
from leasecron.testing._stores import PostgresDatabase, RedisDatabase

REPLICA = Path(__file__).with_name("_fencing_replica.py")
FENCED_WRITES = 11
"""Writes of one `bill`: 2 invoices x 4 stores + 3 fences (PostgreSQL, SQLite, Redis)."""


@pytest.fixture
def stores(
    postgres_database: PostgresDatabase, redis_database: RedisDatabase, tmp_path: Path
) -> Stores:
    made = Stores(
        postgres=postgres_database.url,
        dsn=postgres_database.dsn,
        sqlite=f"sqlite:///{tmp_path / 'billing.db'}",
        redis=redis_database.url,
    )
    create_tables(made)
    return made


class Replica:
    """A `_fencing_replica.py` child and the JSON lines it said."""

    def __init__(self, tmp_path: Path, *argv: str, kubeconfig: Path | None = None) -> None:
        """argv: mode namespace identity tick stores [sent-file]."""
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.child = ChildProcess(
            name=argv[2],
            argv=[sys.executable, str(REPLICA), *argv],
            log_path=tmp_path / f"{argv[2]}.log",
            env={"KUBECONFIG": str(kubeconfig)} if kubeconfig else None,
            stdin=True,
            on_line=lambda data, _: self.lines.put(data),
        )

    def expect(self, event: str, timeout: float = 30) -> dict[str, Any]:
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"{self.child.name} said nothing: {self.child.log_tail()}"
            ) from None
        assert line["event"] == event, (line, self.child.log_tail())
        return line


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.child.signal(signal.SIGCONT)
        replica.child.stop(grace=5)


def now_tick() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def test_a_holder_stalled_past_its_grant_is_refused_by_every_store_after_its_successor_wrote(
    kube_api: ApiClient,
    kubeconfig: Path,
    namespace: str,
    stores: Stores,
    tmp_path: Path,
    replicas: list[Replica],
) -> None:
    stores_json = json.dumps(stores.as_dict())
    argv = ("stalled", namespace, "stalled", now_tick().isoformat(), stores_json)
    stalled = Replica(tmp_path, *argv, kubeconfig=kubeconfig)
    replicas.append(stalled)
    stale_token = stalled.expect("held")["token"]
    stalled.child.signal(signal.SIGSTOP)  # paused between its check and its writes

    successor = Guard(
        "invoices",
        namespace=namespace,
        kube=Kube(kube_api),
        identity="successor",
        at_most_for="1m",
        lease_duration="2s",
    )

    def succeed() -> tuple[int, dict[str, bool]] | None:
        with successor.claim(tick=now_tick()) as run:
            return (run.token, bill(stores, run, total=2)) if run and run.token else None

    try:
        token, applied = poll(succeed, timeout=20, what="the successor's grant", interval=0.2)
    finally:
        close_guards()
    assert token > stale_token and all(applied.values()), applied

    stalled.child.signal(signal.SIGCONT)
    stalled.child.send("write")
    billed = stalled.expect("billed")
    assert not any(billed["applied"].values()), billed["applied"]
    assert billed["refused"] == FENCED_WRITES
    assert stored_totals(stores) == {
        **{
            f"{store} invoices": [("acme", 2, token), ("globex", 2, token)]
            for store in ("postgres", "sqlite", "psycopg", "redis")
        },
        **{f"{store} ledger": ["total 2"] for store in ("postgres", "sqlite", "redis")},
    }


def test_two_replicas_running_the_same_tick_unguarded_send_one_reminder_per_store(
    stores: Stores, tmp_path: Path, replicas: list[Replica]
) -> None:
    sent = tmp_path / "sent"
    tick = now_tick().isoformat()
    for identity in ("r0", "r1"):
        argv = ("unguarded", "billing", identity, tick, json.dumps(stores.as_dict()), str(sent))
        replicas.append(Replica(tmp_path, *argv))
    for replica in replicas:
        replica.expect("ready")
    for replica in replicas:
        replica.child.send("go")
    claims = [replica.expect("reminded")["claims"] for replica in replicas]
    for store in ("postgres", "sqlite", "psycopg", "redis"):
        assert sorted(c[store] for c in claims) == [False, True], claims
    lines = sent.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == ["postgres", "psycopg", "redis", "sqlite"]
