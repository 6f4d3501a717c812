"""What every scheduler replica of test_integrations_schedulers does: append one line
"<tick> <identity> <token>" to a shared file per run of its guarded job, say on stdout
when its scheduler runs, and stop when its stdin closes.

`LEASECRON_TEST_UNGUARDED=1` runs the job's body without the guard (each replica then
writes the tick its own clock is in, token "-"): the way to check that the test fails when
nothing coordinates the replicas."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from leasecron.runtime import close_guards, current_run

UNGUARDED = os.environ.get("LEASECRON_TEST_UNGUARDED") == "1"


def arguments() -> tuple[str, str, str]:
    """namespace, identity, effects file: the replica's command line."""
    namespace, identity, effects = sys.argv[1:4]
    return namespace, identity, effects


def effect(identity: str, effects: str) -> Callable[[], str]:
    """The job's body: append this run's line to `effects`; the line."""

    def body() -> str:
        if UNGUARDED:
            tick, token = datetime.now(UTC).replace(microsecond=0), "-"
        else:
            run = current_run()
            run.assert_held()
            tick, token = run.tick, str(run.token)
        line = f"{tick.isoformat()} {identity} {token}\n"
        fd = os.open(effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return line

    body.__name__ = "tick_effect"
    return body


def guard_options(namespace: str, identity: str) -> dict[str, Any]:
    """What every replica's guard is given: this test's namespace, its identity, short
    grants."""
    return {"namespace": namespace, "identity": identity, "at_most_for": "3s"}


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def serve_until_stdin_closes(stop: Callable[[], object]) -> None:
    """Say "ready", block until the test closes stdin, then `stop()` the scheduler and
    release the guards' grants."""
    say("ready")
    sys.stdin.read()
    stop()
    close_guards()
