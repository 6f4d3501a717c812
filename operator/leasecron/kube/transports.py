"""The seam around a `Kube`'s HTTP round trip: what a transport wrapper sees and may do.

`Kube.wrap_transport(wrapper)` puts `wrapper` around every request the Kube sends from then
on. A wrapper is called with the request's description (`Request`) and `send`, the rest of
the chain (the next wrapper or the real round trip). It returns the response `send` gave, or
raises a `KubeError` instead of sending, or after sending; it may also wait before or after.
Test code uses this to inject faults (`leasecron.testing.faults`); nothing in the library
installs a wrapper.

`send()` returns the raw urllib3 response, any status included: the Kube maps a non-2xx
status to its error after the wrappers return. `send()` counts the request in
API_REQUESTS and maps a transport error itself. A wrapper that drops a response it got
closes it and releases its connection. What this module does not promise: the order in
which wrappers of different owners see a request beyond "the last installed sees it first".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

import urllib3

from leasecron.kube._paths import describe, is_write, target

__all__ = ["Request", "Send", "TransportWrapper", "describe_request"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class Request:
    """One request as a wrapper sees it. `verb` and `resource` are the metric labels
    (`describe`: "list", "watch", "leases/status"...); `name` is the object's, or the created
    object's for a create; `timeout` is the total for a plain request, the read timeout
    between chunks for a stream (a watch)."""

    method: str
    url: str
    verb: str
    resource: str
    name: str | None
    namespace: str | None
    write: bool
    stream: bool
    timeout: float


Send = Callable[[], urllib3.BaseHTTPResponse]
TransportWrapper = Callable[[Request, Send], urllib3.BaseHTTPResponse]


def describe_request(
    method: str,
    path: str,
    *,
    url: str,
    query: Mapping[str, str] | None,
    body: object | None,
    stream: bool,
    timeout: float,
) -> Request:
    """The `Request` for `method path` (method upper-case) sent to `url`."""
    verb, resource = describe(method, path, query)
    namespace, name = target(path)
    if name is None and verb == "create" and isinstance(body, dict):
        name = (body.get("metadata") or {}).get("name")
    return Request(
        method=method,
        url=url,
        verb=verb,
        resource=resource,
        name=name,
        namespace=namespace,
        write=is_write(method),
        stream=stream,
        timeout=timeout,
    )
