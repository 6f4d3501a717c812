"""`Kube`: the one object through which leasecron sends HTTP to the API server.

It reuses the official `kubernetes` client for everything about *how* to connect (kubeconfig
and in-cluster loading, TLS, client certificates, bearer tokens and their refresh) and sends
raw JSON itself: dicts in, dicts out, errors mapped by `errors.map_error`. Blocking requests run
in a bounded thread pool; `request()` is the async face of the one blocking implementation.
Requests for Leases (claims, renewals, releases, member and group records) have a small pool
of their own, so that a grant's renewal never queues behind the pool's other requests (the
thousands of run records of one claim, say) while its deadline passes.
Each request has its own timeout (`timeout=`, default `request_timeout`), enforced by urllib3
in the sending thread, so no caller needs `asyncio.wait_for` around a request.

Every request is counted (`request_count`, per-method counts, and the Prometheus counter
API_REQUESTS{verb,resource,code}). What it does not do: retry. A connection that cannot be
opened is retried once by urllib3 (nothing was sent); everything else surfaces as a KubeError
so the caller decides. Not-yet-sent requests are safe to repeat; a write that may have reached
the server without a reply raises `OutcomeUnknown`: it may have landed, so read back before
treating it as not written. A caller that cancels a write in flight (or times out around
it) gets CancelledError (TimeoutError): cancellation always propagates, and the write may
still land.

`wrap_transport` is the one seam around the round trip (see `transports`): test code wraps a
Kube's transport to fail, delay or cut short chosen requests (`leasecron.testing.faults`).
A Kube has no wrapper unless one is installed, and reads nothing from the environment for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import threading
from collections import Counter
from collections.abc import Generator, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import urlencode

import kubernetes.client
import kubernetes.config
import urllib3

from leasecron._logs import get_logger
from leasecron._metrics import API_REQUESTS
from leasecron.kube._paths import collection_path, describe, is_write, object_path
from leasecron.kube.errors import KubeError, map_error, status_error
from leasecron.kube.transports import Request, Send, TransportWrapper, describe_request

_log = get_logger("leasecron.kube")
__all__ = ["Kube", "WatchStream", "collection_path", "object_path"]

# Connections that could not be opened are retried once; nothing else is retried here.
_RETRIES = urllib3.Retry(total=1, connect=1, read=0, redirect=0, status=0, other=0)
_JSON = "application/json"


class WatchStream(Iterator[bytes]):
    """The lines of one streaming response (a watch), iterated by one thread. `close()` from
    any other thread unblocks that iteration (it then ends quietly); `close()` from the
    iterating thread also releases the connection at once. A stream that ends cleanly returns
    its connection to the pool; any other ending closes it."""

    def __init__(self, response: urllib3.BaseHTTPResponse) -> None:
        self._response = response
        self._lines = self._iterate()
        self._closed = threading.Event()
        self._owner: int | None = None

    def _iterate(self) -> Generator[bytes, None, None]:
        pending = b""
        finished = False
        try:
            for chunk in self._response.stream(amt=None, decode_content=True):
                pending += chunk
                *lines, pending = pending.split(b"\n")
                yield from (line for line in lines if line.strip())
            if pending.strip():
                yield pending
            finished = not self._closed.is_set()
        except Exception as e:
            if self._closed.is_set():
                return
            raise map_error(e) from e
        finally:
            if not finished:
                self._response.close()
            self._response.release_conn()

    def __next__(self) -> bytes:
        if self._owner is None:
            self._owner = threading.get_ident()
        return next(self._lines)

    def close(self) -> None:
        """Stop the stream; safe to call from any thread and more than once."""
        if not self._closed.is_set():
            self._closed.set()
            with contextlib.suppress(Exception):  # a socket already gone is what we want
                self._response.shutdown()
        if self._owner is None:  # never iterated: nobody else will release it
            self._response.close()
            self._response.release_conn()
        elif self._owner == threading.get_ident():
            self._lines.close()  # suspended in this thread: runs its cleanup now


LEASE_WORKERS = 4
"""Threads of the Lease pool: Lease requests are few, small and each has a deadline."""
_LEASE_PATHS = "/apis/coordination.k8s.io/"


class Kube:
    """Async facade over the official `kubernetes` client (auth, TLS, config); raw JSON dicts
    in and out. Blocking calls run in a bounded thread pool; one Kube per process is the norm.

    The client's connection pool is resized to `max_workers` plus room for watches (this
    rebuilds `api_client.rest_client` when it was smaller).
    """

    def __init__(
        self,
        api_client: kubernetes.client.ApiClient,
        *,
        max_workers: int = 32,
        request_timeout: float = 10.0,
    ) -> None:
        if max_workers < 1 or request_timeout <= 0:
            raise ValueError(
                f"need max_workers >= 1 and request_timeout > 0, "
                f"got {max_workers} and {request_timeout}"
            )
        self.api_client = api_client
        self.request_timeout = request_timeout
        self._owns_client = False
        configuration = api_client.configuration
        wanted = max_workers + LEASE_WORKERS + 16
        if (configuration.connection_pool_maxsize or 0) < wanted:
            configuration.connection_pool_maxsize = wanted
            api_client.rest_client.close()
            api_client.rest_client = kubernetes.client.rest.RESTClientObject(configuration)
        self._executor = ThreadPoolExecutor(max_workers, thread_name_prefix="leasecron-kube")
        self._lease_executor = ThreadPoolExecutor(
            LEASE_WORKERS, thread_name_prefix="leasecron-kube-leases"
        )
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._wrappers: tuple[TransportWrapper, ...] = ()

    @classmethod
    def from_config(
        cls,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        max_workers: int = 32,
        request_timeout: float = 10.0,
    ) -> Kube:
        """A Kube from the environment: in-cluster credentials when KUBERNETES_SERVICE_HOST is
        set and no kubeconfig is given (argument or $KUBECONFIG); else the kubeconfig file
        (`kubeconfig`, $KUBECONFIG or ~/.kube/config) and its `context`."""
        configuration = kubernetes.client.Configuration()
        explicit = kubeconfig or os.environ.get("KUBECONFIG")
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not explicit:
            kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
        configuration.connection_pool_maxsize = max_workers + LEASE_WORKERS + 16
        kube = cls(
            kubernetes.client.ApiClient(configuration),
            max_workers=max_workers,
            request_timeout=request_timeout,
        )
        kube._owns_client = True
        return kube

    @property
    def request_count(self) -> int:
        """Requests sent so far by this Kube (including ones that failed, and watch opens)."""
        with self._lock:
            return sum(self._counts.values())

    @property
    def request_counts(self) -> dict[str, int]:
        """Requests sent so far, by HTTP method (GET, POST, PUT, PATCH, DELETE)."""
        with self._lock:
            return dict(self._counts)

    @property
    def write_count(self) -> int:
        """Requests sent so far that change state (POST, PUT, PATCH, DELETE)."""
        with self._lock:
            return sum(n for method, n in self._counts.items() if is_write(method))

    @property
    def transport_wrappers(self) -> tuple[TransportWrapper, ...]:
        """The wrappers installed by `wrap_transport`, first installed first."""
        return self._wrappers

    def wrap_transport(self, wrapper: TransportWrapper) -> None:
        """Put `wrapper` around every request sent from now on (see `transports`); the last
        one installed sees a request first."""
        if not callable(wrapper):
            raise TypeError(f"wrap_transport takes a callable, got {wrapper!r}")
        with self._lock:
            self._wrappers = (*self._wrappers, wrapper)

    def unwrap_transport(self, wrapper: TransportWrapper) -> None:
        """Take `wrapper` (one `wrap_transport` put on, compared by ==) off again; requests
        already in flight may still pass through it."""
        with self._lock:
            self._wrappers = tuple(w for w in self._wrappers if w != wrapper)

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: object | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str | None = None,
        timeout: float | None = None,  # noqa: ASYNC109  # urllib3's own, in the sending thread
    ) -> dict[str, Any]:
        """Send one request from the pool (a Lease request from the Lease pool); the parsed
        JSON response (`{}` when empty). `timeout`: seconds for this request (default
        `request_timeout`). Raises KubeError subclasses. Cancelling the call (or a
        caller-side timeout) does not stop a write already in flight: it may still land, and
        callers read back before relying on it not having happened. Prefer `timeout=`,
        which ends the request itself."""
        call = functools.partial(
            self.request_sync,
            method,
            path,
            body=body,
            query=query,
            content_type=content_type,
            timeout=timeout,
        )
        pool = self._lease_executor if path.startswith(_LEASE_PATHS) else self._executor
        future = pool.submit(call)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            if not future.cancel() and is_write(method):
                # Cancellation propagates (a task that was cancelled must stop), but the write
                # may still land: callers that gave up on a write read back before relying
                # on it not having happened (a caller-side timeout reaches them as TimeoutError).
                verb, _ = describe(method, path, query)
                _log.info("gave up on a write in flight; it may still land", verb=verb, path=path)
            raise

    def request_sync(
        self,
        method: str,
        path: str,
        *,
        body: object | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """`request()`, blocking the calling thread."""
        if timeout is None:
            timeout = self.request_timeout
        elif isinstance(timeout, bool) or not timeout > 0:
            raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
        response = self._send(
            method,
            path,
            body=body,
            query=query,
            content_type=content_type,
            stream=False,
            timeout=timeout,
        )
        data = response.data
        if not data:
            return {}
        try:
            parsed = json.loads(data)
        except ValueError as e:
            raise KubeError(f"{method} {path}: response is not JSON: {data[:200]!r}") from e
        if not isinstance(parsed, dict):
            raise KubeError(f"{method} {path}: expected a JSON object, got {type(parsed)}")
        return parsed

    def stream_lines(self, path: str, *, query: Mapping[str, str]) -> WatchStream:
        """Open a streaming GET (a watch) and return its non-empty lines, blocking. The read
        timeout is the query's timeoutSeconds plus a margin, so a silent dead peer ends it."""
        read_timeout = float(query.get("timeoutSeconds", 300)) + 30.0
        response = self._send("GET", path, query=query, stream=True, timeout=read_timeout)
        return WatchStream(response)

    def _send(
        self,
        method: str,
        path: str,
        *,
        body: object | None = None,
        query: Mapping[str, str] | None = None,
        content_type: str | None = None,
        stream: bool,
        timeout: float,
    ) -> urllib3.BaseHTTPResponse:
        """Send one request through the installed wrappers, if any; `timeout` is the total for
        a plain request, the read timeout (between chunks) for a stream."""
        method = method.upper()
        with self._lock:
            self._counts[method] += 1
        url = self.api_client.configuration.host + path
        if query:
            url = f"{url}?{urlencode(dict(query))}"
        headers = self._headers(method, path, content_type=content_type, has_body=body is not None)
        payload = None if body is None else _encode(body)
        if stream:
            limits = urllib3.Timeout(connect=self.request_timeout, read=timeout)
        else:
            limits = urllib3.Timeout(total=timeout)
        verb, resource = describe(method, path, query)
        write = is_write(method)

        def send() -> urllib3.BaseHTTPResponse:
            try:
                response = self.api_client.rest_client.pool_manager.request(
                    method,
                    url,
                    body=payload,
                    headers=headers,
                    timeout=limits,
                    retries=_RETRIES,
                    preload_content=not stream,
                )
            except Exception as e:
                API_REQUESTS.labels(verb=verb, resource=resource, code="error").inc()
                raise map_error(e, write=write) from e
            API_REQUESTS.labels(verb=verb, resource=resource, code=str(response.status)).inc()
            return response

        wrappers = self._wrappers
        if wrappers:
            request = describe_request(
                method, path, url=url, query=query, body=body, stream=stream, timeout=timeout
            )
            response = _through(wrappers, request, send)
        else:
            response = send()
        if not 200 <= response.status < 300:
            raw = response.data if not stream else response.read()
            response.release_conn()
            raise status_error(response.status, raw or b"")
        return response

    def _headers(
        self, method: str, path: str, *, content_type: str | None, has_body: bool
    ) -> dict[str, str]:
        """Default headers, auth (bearer token, refreshed by the client's hook) and types."""
        extra = {"Accept": _JSON}
        if has_body:
            extra["Content-Type"] = content_type or _JSON
        _, _, headers, _, _ = self.api_client.param_serialize(
            method, path, header_params=extra, auth_settings=["BearerToken"]
        )
        return {str(k): str(v) for k, v in headers.items()}

    async def close(self) -> None:
        """Stop the pool (requests in flight finish in their threads) and, for a Kube built by
        `from_config`, close its connections."""
        self._executor.shutdown(wait=False, cancel_futures=True)
        self._lease_executor.shutdown(wait=False, cancel_futures=True)
        if self._owns_client:
            self.api_client.rest_client.close()


def _through(
    wrappers: tuple[TransportWrapper, ...], request: Request, send: Send
) -> urllib3.BaseHTTPResponse:
    """`send` through `wrappers`, the last one outermost."""
    for wrapper in wrappers:
        send = functools.partial(wrapper, request, send)
    return send()


def _encode(body: object) -> bytes:
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return json.dumps(body, separators=(",", ":")).encode()
