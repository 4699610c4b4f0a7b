"""Zero-downtime shutdown: what the gateway does between SIGTERM and exit.

    SIGTERM -> Drain.begin()     /healthz answers 503; new requests get 503 `shutting_down` with
                                 `retry-after` and `connection: close`; the listener stays open
            -> drain()           requests in flight finish, for up to `gateway.shutdown_grace_s`
                                 (and at least `gateway.shutdown_delay_s` passes, for load balancers
                                 that are slow to drop this replica)
            -> Drain.cut()       streams still open then end with an SSE `error` event; requests
                                 still waiting for a first token get the 503
            -> the server exits  uvicorn closes the listener and idle keep-alive connections; the
                                 lifespan stops the services (telemetry and usage flushed); status 0

`DrainGate` is the ASGI middleware that counts the requests in flight and refuses new ones while
draining. Reloads use it too: `Drain.snapshot()` names the requests in flight at one moment, so that
the upstream pools they use are closed only once they are done (`reload.py`).
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.errors import ShuttingDown, error_body
from gateway.relay import error_event

log = logging.getLogger("ultraroute")

# Still answered while draining: readiness (which then says 503), liveness and the metrics scrape.
OPERATOR_PATHS = frozenset({"/healthz", "/livez", "/metrics"})
CUT_WAIT_S = 5.0  # after the cut: how long the cancelled requests get to send their last bytes


class Flight:
    """One request in flight, and what its response has sent so far."""

    __slots__ = ("cut", "done", "sse", "started", "task")

    def __init__(self, task: asyncio.Task[object] | None) -> None:
        self.task = task
        self.started = False  # the status line has gone out
        self.sse = False  # ... as `text/event-stream`
        self.done = False  # the last body bytes have gone out
        self.cut = False  # cancelled by `Drain.cut()`


class Drain:
    """The draining switch and the set of requests in flight."""

    def __init__(self) -> None:
        self.draining = False
        self.active: set[Flight] = set()
        self._idle: asyncio.Event | None = None
        # Set by `begin()`: long-lived connections (the Responses WebSocket) close when idle, and once
        # their response in flight is done; they count in `active` only while a response runs.
        self.begun = asyncio.Event()

    def begin(self) -> None:
        self.draining = True
        self.begun.set()

    def snapshot(self) -> frozenset[Flight]:
        return frozenset(self.active)

    async def wait_done(self, flights: frozenset[Flight] | None = None, timeout_s: float | None = None,
                        poll_s: float = 0.05) -> bool:
        """Wait until `flights` (default: every request) are finished; False if `timeout_s` passed."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while (self.active if flights is None else flights & self.active):
            if deadline is not None and time.monotonic() >= deadline:
                return False
            await asyncio.sleep(poll_s)
        return True

    def cut(self) -> int:
        """End every request still in flight (see `DrainGate`); returns how many."""
        for flight in self.active:
            if flight.task is not None and not flight.done:
                flight.cut = True
                flight.task.cancel()
        return sum(f.cut for f in self.active)


async def drain(state: Drain, grace_s: float, delay_s: float = 0.0) -> None:
    """Refuse new requests, let those in flight finish within `grace_s`, then end the rest."""
    started = time.monotonic()
    state.begin()
    log.warning("draining: refusing new requests; %d in flight (grace %.0f s)", len(state.active), grace_s)
    finished = await state.wait_done(timeout_s=grace_s)
    if not finished:
        ended = state.cut()
        log.warning("draining: grace of %.0f s over, ended %d request(s) still in flight", grace_s, ended)
        await state.wait_done(timeout_s=CUT_WAIT_S)
    linger = delay_s - (time.monotonic() - started)
    if linger > 0:
        await asyncio.sleep(linger)
    log.warning("drained in %.1f s", time.monotonic() - started)


class DrainGate:
    """ASGI middleware: counts requests in flight; while draining, refuses new ones with a 503."""

    def __init__(self, app: ASGIApp, drain: Drain) -> None:
        self.app = app
        self.drain = drain

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.drain.draining and scope["path"] not in OPERATOR_PATHS:
            await _refuse(scope, send)
            return
        flight = Flight(asyncio.current_task())

        async def tracked(message: Message) -> None:
            if message["type"] == "http.response.start":
                flight.started = True
                for name, value in message.get("headers", ()):
                    if name == b"content-type":
                        flight.sse = value.startswith(b"text/event-stream")
            elif not message.get("more_body", False):
                flight.done = True
            await send(message)

        active = self.drain.active
        active.add(flight)
        try:
            await self.app(scope, receive, tracked)
        except asyncio.CancelledError:
            if not flight.cut or flight.task is None:
                raise
            flight.task.uncancel()
            await _end_cut(flight, scope, send)
        finally:
            active.discard(flight)


def _error_headers(err: ShuttingDown, length: int) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", b"application/json"), (b"content-length", str(length).encode())]
    return headers + [(k.encode(), v.encode()) for k, v in err.headers().items()]


async def _refuse(scope: Scope, send: Send, err: ShuttingDown | None = None) -> None:
    err = err or ShuttingDown()
    body = error_body(err)
    app = scope.get("app")
    services = getattr(getattr(app, "state", None), "services", None)
    if services is not None:
        services.metrics.rejected(err.metric_label)
    await send({"type": "http.response.start", "status": err.status, "headers": _error_headers(err, len(body))})
    await send({"type": "http.response.body", "body": body})


async def _end_cut(flight: Flight, scope: Scope, send: Send) -> None:
    """The last bytes of a request ended by the cut: the 503 if nothing was sent yet, else (a stream)
    an `error` event, so the client sees why the stream stopped instead of a silent truncation."""
    err = ShuttingDown("This gateway replica shut down before the stream finished "
                       "(gateway.shutdown_grace_s); retry on another.")
    try:
        if not flight.started:
            await _refuse(scope, send, err)
        elif not flight.done:
            await send({"type": "http.response.body", "body": error_event(err) if flight.sse else b"",
                        "more_body": False})
    except OSError:
        pass  # the client has gone too
