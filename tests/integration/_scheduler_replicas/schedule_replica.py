"""A replica with the `schedule` library, `schedule.every(1).seconds.do(...)` (counted from
this process's start) run by its own `run_pending()` loop, the job guarded by
`loops.guarded(..., every="1s")`; with `LEASECRON_TEST_LOOP=plain` in the environment, a
plain `while True: ...; time.sleep(1)` loop calls the guarded function instead."""

from __future__ import annotations

import os
import threading
import time

import schedule
from _effects import UNGUARDED, arguments, effect, guard_options, serve_until_stdin_closes

from leasecron.integrations.loops import guarded

namespace, identity, effects = arguments()
plain_loop = os.environ.get("LEASECRON_TEST_LOOP") == "plain"
body = effect(identity, effects)
tick_effect = body if UNGUARDED else guarded(body, every="1s", **guard_options(namespace, identity))
stop = threading.Event()


def run_schedule() -> None:
    schedule.every(1).seconds.do(tick_effect)
    while not stop.is_set():
        schedule.run_pending()
        time.sleep(0.05)


def run_plain_loop() -> None:
    while not stop.is_set():
        tick_effect()
        time.sleep(1)


loop = threading.Thread(target=run_plain_loop if plain_loop else run_schedule)
loop.start()


def finish() -> None:
    stop.set()
    loop.join()


serve_until_stdin_closes(finish)
