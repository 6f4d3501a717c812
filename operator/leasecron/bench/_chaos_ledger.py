"""The chaos soak's fenced ledger: an HTTP service outside the replicas that every handler side
effect goes through, and the record the figures are computed from.

It stands in for a job's own database with *fencing only*: it keeps the highest fencing token
seen per job and refuses a write with a lower one (or with none); with a PostgreSQL store
(`_chaos_store`, what `leasecron bench chaos` uses when PostgreSQL is installed) that check and
the effect's row are `leasecron.fencing.hold_fence` and an insert in one transaction. It does
**not** dedupe by
natural key, so a tick whose effect it accepted twice is a duplicate effect that fencing did not
stop (the soak's target is 0). Every attempt is kept, accepted or refused, with job, tick,
token, replica and the bench's wall time.

Endpoints (JSON bodies, all POST except /prices):

- `/invoice` {job, tick, token, replica}: a once-per-tick effect; answers `written`,
  `duplicate` (accepted, and the tick already had an accepted effect) or `stale` (refused).
  A written invoice enqueues one mail for the single-owner job.
- `/term/begin`, `/mail/take`, `/term/end` {job, token, replica}: the single-owner job's term
  and its queue; a stale token answers 409.
- `GET /prices`: the every-replica job's read (no effect).

Runs in threads of the bench process (`LedgerServer`), so a SIGSTOPped or SIGKILLed replica
never holds it up. Does not persist across bench runs; `effects.jsonl` in the work directory
is a copy for post-mortems.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from leasecron.bench._chaos_store import PostgresEffects

PRICES = {"acme": 4900, "globex": 1900, "initech": 0}
WRITTEN, DUPLICATE, STALE = "written", "duplicate", "stale"


@dataclass(frozen=True, kw_only=True)
class Effect:
    """One attempted side effect. `accepted` is False when the fence refused it."""

    kind: str  # invoice | term | mail
    job: str
    tick: str
    token: int | None
    replica: str
    accepted: bool
    outcome: str
    at: float


class FencedLedger:
    """The ledger's state; thread-safe. Usable without HTTP (unit tests). With `store`, the
    store's fence decides (PostgreSQL through leasecron.fencing, `_chaos_store`) and the
    accepted effects land there too; without, a fence kept in memory does."""

    def __init__(
        self, *, log_path: Path | None = None, store: PostgresEffects | None = None
    ) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._fences: dict[str, int] = {}
        self._written: set[tuple[str, str]] = set()
        self._mails: deque[str] = deque()
        self.effects: list[Effect] = []
        self._log = log_path.open("a", encoding="utf-8") if log_path is not None else None

    def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def _fenced(
        self, job: str, token: int | None, *, kind: str = "", tick: str = "", replica: str = ""
    ) -> bool:
        """True (and the fence raised) when `token` is at least the highest seen for `job`;
        with a store, when the store accepted the effect."""
        if self.store is not None:
            return self.store.write(kind=kind, job=job, tick=tick, token=token, replica=replica)
        if token is None or token < self._fences.get(job, -1):
            return False
        self._fences[job] = token
        return True

    def _record(self, effect: Effect) -> None:
        self.effects.append(effect)
        if self._log is not None:
            self._log.write(json.dumps(asdict(effect)) + "\n")
            self._log.flush()

    def invoice(self, *, job: str, tick: str, token: int | None, replica: str) -> str:
        with self._lock:
            if not self._fenced(job, token, kind="invoice", tick=tick, replica=replica):
                outcome = STALE
            elif (job, tick) in self._written:
                outcome = DUPLICATE
            else:
                outcome = WRITTEN
                self._written.add((job, tick))
                self._mails.append(json.dumps({"mail": "invoice", "job": job, "tick": tick}))
            self._record(
                Effect(
                    kind="invoice",
                    job=job,
                    tick=tick,
                    token=token,
                    replica=replica,
                    accepted=outcome != STALE,
                    outcome=outcome,
                    at=time.time(),
                )
            )
            return outcome

    def term(self, *, kind: str, job: str, token: int, replica: str) -> tuple[bool, str | None]:
        """`begin` or `take` for a single-owner term: (accepted, the mail taken if any)."""
        with self._lock:
            accepted = self._fenced(job, token, kind=f"term-{kind}", replica=replica)
            mail = self._mails.popleft() if accepted and kind == "take" and self._mails else None
            if kind == "begin" or mail is not None or not accepted:
                self._record(
                    Effect(
                        kind="term" if kind == "begin" else "mail",
                        job=job,
                        tick="",
                        token=token,
                        replica=replica,
                        accepted=accepted,
                        outcome=WRITTEN if accepted else STALE,
                        at=time.time(),
                    )
                )
            return accepted, mail

    def snapshot(self) -> list[Effect]:
        with self._lock:
            return list(self.effects)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 30.0  # a replica stopped in the middle of a request must not pin a thread forever

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _reply(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(OSError):  # the replica died while we answered
            self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/prices":
            self._reply(200, {"prices": PRICES})
        else:
            self._reply(404, {"error": self.path})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
            job, replica = str(body["job"]), str(body.get("replica", ""))
            token = body.get("token")
            token = int(token) if token is not None else None
        except (ValueError, KeyError, TypeError, OSError) as e:
            self._reply(400, {"error": str(e)})
            return
        ledger = self.server.ledger
        if self.path == "/invoice":
            outcome = ledger.invoice(job=job, tick=str(body["tick"]), token=token, replica=replica)
            self._reply(200, {"outcome": outcome})
        elif self.path in ("/term/begin", "/mail/take") and token is not None:
            kind = "begin" if self.path == "/term/begin" else "take"
            accepted, mail = ledger.term(kind=kind, job=job, token=token, replica=replica)
            self._reply(200 if accepted else 409, {"mail": mail, "stale": not accepted})
        elif self.path == "/term/end":
            self._reply(200, {})
        else:
            self._reply(404, {"error": self.path})


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    ledger: FencedLedger


class LedgerServer:
    """The ledger on a free 127.0.0.1 port, served by daemon threads until `stop()`."""

    def __init__(
        self, *, log_path: Path | None = None, store: PostgresEffects | None = None
    ) -> None:
        self.ledger = FencedLedger(log_path=log_path, store=store)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.ledger = self.ledger
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="chaos-ledger", daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> LedgerServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
        self.ledger.close()
