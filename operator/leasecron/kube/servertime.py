"""The API server's clock, estimated from its responses: "use the store's now(), not each
replica's clock" (docs/design.md §5.17).

Every response of the API server carries a `Date` header: the server's wall time when it
answered, to the second. A request sent at local wall time `sent` and answered at
`received` says that the server's clock read somewhere in [Date, Date + 1) at a moment in
[sent, received] of ours, so the offset (server minus local) lies in the open interval
(Date - received, Date + 1 - sent). `ServerTime` intersects those intervals over the recent
responses (`WINDOW_S`, at most `SAMPLES`): requests answered at different phases of the
server's second narrow it to about one round trip. The offset used is the smallest the
responses allow: 0 while the intersection holds 0 (the local clock agrees with the server as
far as can be told, so replicas in step stay in step, untouched by the estimate's width),
else its end nearest 0. An empty intersection means a clock stepped (NTP, a suspended VM):
the older samples are dropped and the estimate starts again from the newest.

`ServerTime.wrapper` is a transport wrapper (`kube.transports`) that feeds it from every
response a `Kube` gets; `install(kube)` puts it on a Kube and `remove()` takes it off.

What it does not promise: before the first response the offset is 0, and the estimate is
only as narrow as the responses seen (one round trip at best, a second at worst). It
measures the wall clock `wall` it was given (the scheduler's), not the host's.
"""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime

import urllib3

from leasecron.kube.clients import Kube
from leasecron.kube.transports import Request, Send

WINDOW_S = 120.0
"""Responses older than this (by the monotonic clock) no longer narrow the estimate."""
SAMPLES = 64
"""At most this many recent responses are intersected."""

_Sample = tuple[float, float, float]  # (monotonic when received, low, high)


class ServerTime:
    """An estimate of (server's wall clock - `wall()`), in seconds, from response headers."""

    def __init__(
        self,
        *,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._wall = wall
        self._monotonic = monotonic
        self._samples: collections.deque[_Sample] = collections.deque(maxlen=SAMPLES)
        self._lock = threading.Lock()
        self._offset = 0.0
        self._bounds: tuple[float, float] | None = None
        self._kube: Kube | None = None

    def offset(self) -> float:
        """Seconds to add to `wall()` to read the server's clock: the smallest correction
        the responses prove needed (0 until a response, and while 0 is possible)."""
        return self._offset

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The interval the offset lies in, from the responses seen (None before any)."""
        return self._bounds

    def observe(self, *, sent: float, received: float, date: str | None) -> None:
        """Take one response: sent and answered at `sent`/`received` of `wall()`, with the
        raw `Date` header (ignored when missing or unreadable)."""
        if not date:
            return
        try:
            server = parsedate_to_datetime(date).timestamp()
        except (TypeError, ValueError, IndexError, OverflowError):
            return
        now = self._monotonic()
        with self._lock:
            samples = self._samples
            samples.append((now, server - received, server + 1.0 - sent))
            while samples and now - samples[0][0] > WINDOW_S:
                samples.popleft()
            low = max(s[1] for s in samples)
            high = min(s[2] for s in samples)
            if low > high:  # a clock stepped: start again from the newest response
                newest = samples[-1]
                samples.clear()
                samples.append(newest)
                low, high = newest[1], newest[2]
            self._bounds = (low, high)
            self._offset = low if low > 0 else high if high < 0 else 0.0

    def wrapper(self, request: Request, send: Send) -> urllib3.BaseHTTPResponse:
        """A transport wrapper: passes the request on and observes the response's Date."""
        sent = self._wall()
        response = send()
        self.observe(sent=sent, received=self._wall(), date=response.headers.get("Date"))
        return response

    def install(self, kube: Kube) -> None:
        """Observe every response `kube` gets from now on (once per ServerTime)."""
        if self._kube is None:
            kube.wrap_transport(self.wrapper)
            self._kube = kube

    def remove(self) -> None:
        """Stop observing the Kube `install` put this on."""
        kube, self._kube = self._kube, None
        if kube is not None:
            kube.unwrap_transport(self.wrapper)


__all__ = ["SAMPLES", "WINDOW_S", "ServerTime"]
