"""A billing replica for test_fencing_proofs, speaking JSON lines.

argv: mode namespace identity tick(ISO 8601) stores(JSON) [sent-file]

- `stalled`: claim `tick` of the guard "invoices" (a 2 s Lease), check the grant is held,
  say "held" with the token, then wait for a line on stdin (the test SIGSTOPs it meanwhile)
  and bill every store with that token, unchecked, as a holder paused between its check and
  its write would; say "billed" with what applied and the refusals counted here.
- `unguarded` (the Lease protocol bypassed, as `LEASECRON_TEST_UNGUARDED=1` does): build the
  run of `tick` without claiming anything (a `JobContext` with no token), wait for a line on
  stdin, then claim the period on every store and send the reminder where the claim won;
  say "reminded".
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from pathlib import Path

from fencing_effects import Stores, bill, remind
from prometheus_client import REGISTRY

from leasecron import JobContext
from leasecron.models.specs import Bucket
from leasecron.runtime import Guard, close_guards


def say(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def refusals() -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "leasecron_fenced_writes_refused"
        for sample in metric.samples
        if sample.name.endswith("_total")
    )


def main() -> None:
    mode, namespace, identity, tick_text, stores_text = sys.argv[1:6]
    tick = datetime.fromisoformat(tick_text)
    stores = Stores(**json.loads(stores_text))
    if mode == "unguarded":
        run = JobContext(
            job="invoices",
            namespace=namespace,
            tick=tick,
            holder=identity,
            bucket=Bucket.ONCE_PER_TICK,
            unguarded=True,
        )
        say("ready")
        sys.stdin.readline()
        say("reminded", claims=remind(stores, run, Path(sys.argv[6]), identity))
        return
    g = Guard(
        "invoices", namespace=namespace, identity=identity, at_most_for="1m", lease_duration="2s"
    )
    try:
        with g.claim(tick=tick) as held:
            if not held:
                say("skipped", reason=held.reason)
                return
            held.assert_held()
            say("held", token=held.token)
            sys.stdin.readline()
            say("billed", applied=bill(stores, held, total=1), refused=refusals())
    except Exception as e:  # the grant is gone by now; releasing it may say so
        say("released", error=repr(e))
    finally:
        close_guards()


if __name__ == "__main__":
    main()
