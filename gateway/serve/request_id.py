"""Every request's id: the client's `x-request-id` when it is a plain token, else a new one, kept in
`scope["state"]["request_id"]` and echoed in the response's `x-request-id` (errors and refusals too:
the middleware is outermost)."""

from __future__ import annotations

import random
import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

_SAFE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def assign_request_id(scope: Scope, send: Send) -> tuple[str, Send]:
    """The request's id (the client's `x-request-id` if it is a plain token, else a new one), stored
    in `scope["state"]["request_id"]`, and a `send` that adds it to the response's headers."""
    request_id = ""
    for name, value in scope["headers"]:
        if name == b"x-request-id":
            candidate = value.decode("latin-1")
            # Only a plain token goes back into a header: no header injection through the id.
            request_id = candidate if _SAFE_REQUEST_ID.match(candidate) else ""
            break
    # Ids only correlate logs, never authorize: the stdlib's generator (no system call, reseeded in
    # forked workers) is enough; `os.urandom` was ~1.5% of a request's CPU.
    request_id = request_id or f"{random.getrandbits(96):024x}"
    scope.setdefault("state", {})["request_id"] = request_id
    raw_id = request_id.encode()

    async def send_with_id(message: Message) -> None:
        if message["type"] == "http.response.start":
            headers = message.setdefault("headers", [])
            for name, _ in headers:  # not any() over a generator: one stopped early raises GeneratorExit in it
                if name == b"x-request-id":
                    break
            else:
                headers.append((b"x-request-id", raw_id))
        await send(message)

    return request_id, send_with_id


class RequestIdMiddleware:
    """Give every request an id (`scope["state"]["request_id"]`) and echo it as `x-request-id`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        _, send_with_id = assign_request_id(scope, send)
        await self.app(scope, receive, send_with_id)
