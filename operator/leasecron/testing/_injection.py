"""Applying a fired `FaultRule` to one request: the errors, waits and logs of each action.

`Kube._send` asks its FaultPlan for a rule, calls `before_sending` (which raises for fail,
status and hang, and sleeps for delay) and, after a real round trip, `reply_lost` for
lose_reply. Each injected fault logs one warning and counts in
`leasecron_injected_faults_total`. The errors are the ones the real failure would give, built
through `errors.map_error`, so callers cannot tell an injected fault from a real one except
by the message. Nothing here decides which requests match: that is `faults.FaultPlan`.
"""

from __future__ import annotations

import http
import json
import logging
import time

import urllib3.exceptions

from leasecron._metrics import INJECTED_FAULTS
from leasecron.kube.errors import KubeError, OutcomeUnknown, Unavailable, map_error, status_error
from leasecron.kube.faults import FaultRule

log = logging.getLogger("leasecron.faults")

INJECTED = "(injected fault)"


def _record(rule: FaultRule, *, verb: str, resource: str, name: str | None) -> None:
    action = rule.fault.action
    log.warning(
        "injecting fault: %s %s %s -> %s %s",
        verb,
        resource or "-",
        name or "-",
        action,
        INJECTED,
    )
    INJECTED_FAULTS.labels(verb=verb, resource=resource, action=action).inc()


def _status_body(status: int, *, what: str) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = f"HTTP {status}"
    reason = phrase.replace(" ", "").replace("-", "")
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": status,
            "reason": reason,
            "message": f"{what}: {phrase} {INJECTED}",
        }
    ).encode()


def before_sending(
    rule: FaultRule,
    *,
    verb: str,
    resource: str,
    name: str | None,
    url: str,
    write: bool,
    timeout: float,
) -> None:
    """Carry out `rule` before the request would be sent: raise for fail, status and hang
    (nothing is sent), sleep for delay, do nothing yet for lose_reply."""
    fault = rule.fault
    if fault.action == "lose_reply":
        return
    _record(rule, verb=verb, resource=resource, name=name)
    what = f"{verb} {resource} {name or ''}".rstrip()
    if fault.action == "delay":
        time.sleep(fault.seconds)
        return
    if fault.action == "fail":
        raise Unavailable(f"{what}: connection refused {INJECTED}", reason="Unreachable")
    if fault.action == "status":
        raise status_error(fault.status, _status_body(fault.status, what=what))
    # hang: no reply until the request's timeout (or until the rule is lifted), then fail as
    # a real read timeout does, which for a write means the outcome is unknown.
    rule.lifted.wait(timeout)
    timed_out = urllib3.exceptions.ReadTimeoutError(
        None,  # type: ignore[arg-type]  # no pool: nothing was sent
        url,
        f"Read timed out. (read timeout={timeout:g}) {INJECTED}",
    )
    raise map_error(timed_out, write=write)


def reply_lost(
    rule: FaultRule, *, verb: str, resource: str, name: str | None, write: bool
) -> KubeError:
    """The error for a request that was sent and whose reply is now discarded."""
    _record(rule, verb=verb, resource=resource, name=name)
    what = f"{verb} {resource} {name or ''}".rstrip()
    if write:
        return OutcomeUnknown(f"{what}: reply lost {INJECTED}", reason="NoReply")
    return Unavailable(f"{what}: reply lost {INJECTED}", reason="NoReply")
