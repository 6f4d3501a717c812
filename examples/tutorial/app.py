"""The tutorial's application: one once-per-tick job, `hello`, in the Scheduler group
`tutorial`. Start it three times, as three replicas would start in three pods:

    POD_NAME=replica-1 python app.py

Each tick of the ScheduledJob `hello` (hello.yaml) prints one JSON line, on one replica only.
"""

from __future__ import annotations

import json

import leasecron

scheduler = leasecron.Scheduler("tutorial")


@scheduler.job("hello")
def hello(ctx: leasecron.JobContext) -> None:
    line = {"tick": ctx.tick.isoformat(), "holder": ctx.holder, "token": ctx.token}
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    scheduler.run_forever()  # until SIGTERM or Ctrl-C; then it releases its Leases
