"""Admission: past `gateway.max_in_flight` requests in this process, a new one is refused at once.

When the gateway itself is the bottleneck, queueing more work only makes every request late, and a
late request times out against an upstream budget and is blamed on a healthy provider. `Admission`
wraps ASGI apps and counts the client API requests (POST under `/v1/`) in flight, from the
request's arrival to its response's last byte (a stream counts until it ends), and hands the ones
past the limit to `refuse` (app.py renders the 503 `overloaded` with `retry-after`).

It runs before authentication and before the body is read: the check is one integer comparison, and
a refused request costs no key lookup, no body bytes and no JSON parsing, which is the point when
the process is short of CPU. A stranger learns only that the gateway is busy, which the timeouts
would tell it anyway; a wrong key is still refused with 401 whenever there is room. Other routes
(`/healthz`, `/metrics`, `/v1/endpoints`, the admin API, the dashboard) are never refused: they are
how an operator sees the overload. The count is per process: with `serve --workers N` each worker
admits up to `max_in_flight`.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


class Admission:
    """Counts admitted requests; `refuse` answers the ones past `limit`. No lock: one event loop.
    `guard(app)` wraps any ASGI app (FastAPI's stack, a plain handler) in the one shared count."""

    def __init__(self, limit: int, refuse: ASGIApp) -> None:
        self.limit = limit
        self.refuse = refuse
        self.in_flight = 0

    def guard(self, app: ASGIApp) -> ASGIApp:
        async def admitted(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http" or scope["method"] != "POST" or not scope["path"].startswith("/v1/"):
                await app(scope, receive, send)
                return
            if self.in_flight >= self.limit:
                await self.refuse(scope, receive, send)
                return
            self.in_flight += 1
            try:
                await app(scope, receive, send)
            finally:
                self.in_flight -= 1

        return admitted
