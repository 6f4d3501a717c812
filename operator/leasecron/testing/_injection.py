"""Applying a fired `FaultRule` to one request: the errors, waits and logs of each action.

`PlanWrapper` is a Kube transport wrapper (`leasecron.kube.transports`) around one
FaultPlan: for each request it asks the plan for a rule, calls `before_sending` (which raises
for fail, status and hang, and sleeps for delay) and, after a real round trip, `reply_lost`
for lose_reply. Each injected fault logs one warning and counts in
`leasecron_injected_faults_total`; a fault that raises before sending sends nothing, so it
counts in no API_REQUESTS sample. The errors are the ones the real failure would give, built
through `errors.map_error`, so callers cannot tell an injected fault from a real one except
by the message. Nothing here decides which requests match: that is `FaultPlan`.
"""

from __future__ import annotations

import http
import json
import logging
import time

import urllib3
import urllib3.exceptions

from leasecron._metrics import INJECTED_FAULTS
from leasecron.kube.errors import KubeError, OutcomeUnknown, Unavailable, map_error, status_error
from leasecron.kube.transports import Request, Send
from leasecron.testing._fault_rules import FaultPlan, FaultRule

log = logging.getLogger("leasecron.faults")

INJECTED = "(injected fault)"


class PlanWrapper:
    """The transport wrapper that applies `plan` to every request of the Kube it wraps."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan

    def __call__(self, request: Request, send: Send) -> urllib3.BaseHTTPResponse:
        rule = self.plan.match(
            verb=request.verb,
            resource=request.resource,
            name=request.name,
            namespace=request.namespace,
        )
        if rule is None:
            return send()
        before_sending(rule, request)
        response = send()
        if rule.fault.action == "lose_reply":
            response.close()
            response.release_conn()
            raise reply_lost(rule, request)
        return response


def _record(rule: FaultRule, request: Request) -> None:
    action = rule.fault.action
    log.warning(
        "injecting fault: %s %s %s -> %s %s",
        request.verb,
        request.resource or "-",
        request.name or "-",
        action,
        INJECTED,
    )
    INJECTED_FAULTS.labels(verb=request.verb, resource=request.resource, action=action).inc()


def _what(request: Request) -> str:
    return f"{request.verb} {request.resource} {request.name or ''}".rstrip()


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


def before_sending(rule: FaultRule, request: Request) -> None:
    """Carry out `rule` before `request` would be sent: raise for fail, status and hang
    (nothing is sent), sleep for delay, do nothing yet for lose_reply."""
    fault = rule.fault
    if fault.action == "lose_reply":
        return
    _record(rule, request)
    what = _what(request)
    if fault.action == "delay":
        time.sleep(fault.seconds)
        return
    if fault.action == "fail":
        raise Unavailable(f"{what}: connection refused {INJECTED}", reason="Unreachable")
    if fault.action == "status":
        raise status_error(fault.status, _status_body(fault.status, what=what))
    # hang: no reply until the request's timeout (or until the rule is lifted), then fail as
    # a real read timeout does, which for a write means the outcome is unknown.
    rule.lifted.wait(request.timeout)
    timed_out = urllib3.exceptions.ReadTimeoutError(
        None,  # type: ignore[arg-type]  # no pool: nothing was sent
        request.url,
        f"Read timed out. (read timeout={request.timeout:g}) {INJECTED}",
    )
    raise map_error(timed_out, write=request.write)


def reply_lost(rule: FaultRule, request: Request) -> KubeError:
    """The error for `request`, which was sent and whose reply is now discarded."""
    _record(rule, request)
    what = _what(request)
    if request.write:
        return OutcomeUnknown(f"{what}: reply lost {INJECTED}", reason="NoReply")
    return Unavailable(f"{what}: reply lost {INJECTED}", reason="NoReply")
