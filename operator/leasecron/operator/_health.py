"""The health endpoints: `/healthz` (alive: the event loop answers and the election loop
runs) and `/readyz` (ready: a standby waiting for the election Lease, or the leader once its
caches are synced and kopf is watching). Both answer 200 or 503 with a one-line reason.

Owns the small aiohttp server and nothing else; what "alive" and "ready" mean is decided by
the callables it is given.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web

Probe = Callable[[], tuple[bool, str]]


class HealthServer:
    """Serves `/healthz` from `alive()` and `/readyz` from `ready()` on `host:port`."""

    def __init__(self, *, host: str, port: int, alive: Probe, ready: Probe) -> None:
        self._host = host
        self._port = port
        self._alive = alive
        self._ready = ready
        self._runner: web.AppRunner | None = None

    @staticmethod
    def _answer(probe: Probe) -> web.Response:
        ok, reason = probe()
        return web.Response(
            status=200 if ok else 503, text=f"{'ok' if ok else 'not ok'}: {reason}\n"
        )

    async def _healthz(self, _request: web.Request) -> web.Response:
        return self._answer(self._alive)

    async def _readyz(self, _request: web.Request) -> web.Response:
        return self._answer(self._ready)

    async def start(self) -> None:
        """Start listening (port 0 disables the server)."""
        if not self._port:
            return
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, self._host, self._port).start()

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
