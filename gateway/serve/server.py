"""The gateway's HTTP server process: uvicorn, with the gateway's own signal handling.

    SIGTERM, SIGINT   drain (`drain.py`), then let uvicorn stop; a second SIGINT stops at once
    SIGHUP            reload the catalogue and policies (`reload.py`); the server keeps running

uvicorn's own handler would close the listener at the first SIGTERM (a load balancer that has not yet
dropped this replica would see refused connections) and re-raise the signal after shutdown (exit
status -15); this server drains first with the listener open, and `serve()` returns normally.
A parent process that runs several workers forwards SIGTERM and SIGHUP to each; each worker drains
or reloads itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
from collections.abc import Generator
from typing import Any

import uvicorn
from fastapi import FastAPI

from gateway.config import ConfigError
from gateway.serve.drain import drain
from gateway.serve.reload import Reloader

log = logging.getLogger("ultraroute")
# After the drain nothing is in flight; this only bounds uvicorn's wait for connections to close.
CLOSE_TIMEOUT_S = 5
# A request allocates thousands of short-lived containers (a dict per upstream chunk); with CPython's
# default first-generation threshold (700) the collector runs several times per request and promotes
# what is still in flight to older generations, whose collections then walk everything the imports
# left behind. See `GatewayServer.startup`.
GC_THRESHOLDS = (50_000, 20, 20)


class GatewayServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self._stopping: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[object]] = set()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Once the app is built: the objects made so far (modules, the catalogue, the app) live as long
        # as the process, so the collector stops walking them, and it runs less often (GC_THRESHOLDS).
        gc.collect()
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)

    @property
    def app(self) -> FastAPI:
        return self.config.app  # type: ignore[no-any-return]

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
        handlers = {signal.SIGTERM: self.stop, signal.SIGINT: self.stop, signal.SIGHUP: self.reload}
        for sig, handler in handlers.items():
            loop.add_signal_handler(sig, handler, sig)
        try:
            yield
        finally:
            for sig in handlers:
                loop.remove_signal_handler(sig)

    def stop(self, sig: int) -> None:
        if self._stopping is not None:
            if sig == signal.SIGINT:  # Ctrl+C twice: stop now
                self.force_exit = self.should_exit = True
            return
        self._stopping = asyncio.create_task(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        state = self.app.state
        services = getattr(state, "services", None)
        try:
            if services is not None and self.started:
                gw = services.config.gateway
                await drain(state.drain, gw.shutdown_grace_s, gw.shutdown_delay_s)
        finally:  # whatever happened, the process stops
            self.should_exit = True

    def reload(self, sig: int) -> None:
        reloader = getattr(self.app.state, "reloader", None)
        if reloader is None or self._stopping is not None:
            log.warning("SIGHUP ignored: the gateway is %s", "stopping" if self._stopping else "starting")
            return
        task = asyncio.create_task(self._reload(reloader))
        self._tasks.add(task)  # keep a reference until it is done
        task.add_done_callback(self._tasks.discard)


    @staticmethod
    async def _reload(reloader: Reloader) -> None:
        with contextlib.suppress(ConfigError):  # logged; the old configuration keeps serving
            await reloader.reload("SIGHUP")


def serve(app: FastAPI, *, host: str, port: int, log_level: str, sockets: list[socket.socket] | None = None,
          **options: Any) -> None:
    """Run `app` until SIGTERM/SIGINT (drained) and return. `sockets`: listen on these (already bound,
    e.g. shared by workers) instead of binding host:port; `options`: more `uvicorn.Config` settings."""
    config = uvicorn.Config(app, host=host, port=port, loop="uvloop", http="httptools", access_log=False,
                            log_level=log_level, lifespan="on", timeout_graceful_shutdown=CLOSE_TIMEOUT_S,
                            **options)
    GatewayServer(config).run(sockets=sockets)
