"""The chaos soak's effects written to PostgreSQL through `leasecron.fencing`: the ledger
service (`_chaos_ledger`) hands each side effect here, and the store decides whether it lands.
Every write is one transaction: `hold_fence` on the job's fence (raised to the run's token,
locked, or refused when a higher token has been seen), then the effect row. There is no
natural key on purpose: a tick whose effect lands twice is a duplicate effect that the fence
did not stop, counted from the table itself (`duplicate_effects`).

Does not promise: anything about runs without a token (refused, like the in-memory ledger).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import sqlalchemy as sa

from leasecron.fencing import ddl_statements, hold_fence

NAMESPACE = "chaos"
_metadata = sa.MetaData()
effects = sa.Table(
    "chaos_effects",
    _metadata,
    sa.Column("id", sa.BigInteger, sa.Identity(), primary_key=True),
    sa.Column("kind", sa.Text, nullable=False),
    sa.Column("job", sa.Text, nullable=False),
    sa.Column("tick", sa.Text, nullable=False),
    sa.Column("token", sa.BigInteger, nullable=False),
    sa.Column("replica", sa.Text, nullable=False),
)


@dataclass(frozen=True)
class _Run:
    """The run an effect speaks for, as the fencing helpers read it."""

    job: str
    token: int | None
    namespace: str = NAMESPACE
    tick: datetime = datetime(2026, 1, 1, tzinfo=UTC)  # the fence does not look at it


class PostgresEffects:
    """The effects table and the fences, on the database at `url`."""

    def __init__(self, url: str) -> None:
        self.engine = sa.create_engine(url, pool_size=4)

    def create(self) -> PostgresEffects:
        with self.engine.begin() as c:
            for statement in ddl_statements():
                c.exec_driver_sql(statement)
            _metadata.create_all(c)
        return self

    def write(self, *, kind: str, job: str, tick: str, token: int | None, replica: str) -> bool:
        """Land one effect unless the job's fence has seen a higher token; whether it landed."""
        if token is None:
            return False
        with self.engine.begin() as c:
            if not hold_fence(c, job, run=_Run(job=job, token=token)):
                return False
            c.execute(
                effects.insert().values(kind=kind, job=job, tick=tick, token=token, replica=replica)
            )
        return True

    def duplicate_effects(self, *, kind: str = "invoice") -> int:
        """Effects of `kind` beyond the first of their (job, tick)."""
        query = sa.select(
            sa.func.count() - sa.func.count(sa.distinct(sa.tuple_(effects.c.job, effects.c.tick)))
        ).where(effects.c.kind == kind)
        with self.engine.connect() as c:
            return int(c.execute(query).scalar_one())

    def close(self) -> None:
        self.engine.dispose()
