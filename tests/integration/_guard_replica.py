"""A replica process for test_guard: its own timer fires `rounds` times, on whole seconds
from `start` on (or from the next whole second, when it started late), like a scheduler of
the application's would, and calls a guarded function each time; one JSON line per call says
whether the body ran (and with which token) or why not.

argv: namespace identity start(ISO 8601) rounds
"""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC, datetime, timedelta

from leasecron.runtime import close_guards, current_run, guard


def next_second() -> datetime:
    return datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=1)


def main() -> None:
    namespace, identity, start_text, rounds = sys.argv[1:5]
    start = datetime.fromisoformat(start_text)

    @guard("send-reminders", every="1s", namespace=namespace, identity=identity)
    def send_reminders() -> int | None:
        run = current_run()
        run.assert_held()
        return run.token

    try:
        fire_at = max(start, next_second())
        for _ in range(int(rounds)):
            time.sleep(max(0.0, (fire_at - datetime.now(UTC)).total_seconds()))
            result = send_reminders()
            fire_at = max(fire_at + timedelta(seconds=1), next_second())
            line = {"tick": result.tick.isoformat(), "ran": result.ran, "reason": result.reason}
            print(json.dumps({**line, "token": result.token}), flush=True)
    finally:
        close_guards()


if __name__ == "__main__":
    main()
