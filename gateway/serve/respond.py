"""HTTP responses whose work stops when the client hangs up.

A request's work (planning, dispatch, the upstream stream) runs in the request's own task, not in a
task of its own: `unless_disconnected` runs it, listening for the client's `http.disconnect` once the
request has run `WATCH_AFTER_S`, and cancels the work (and so its upstream request) should it come.
`EventStream` sends a stream's body the same way; `JsonAnswer` closes and records the attempt that
served a JSON answer once it is sent, off the client's path to its answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, Protocol

from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from gateway.errors import GatewayError


class Closes(Protocol):
    """What served a JSON answer (pipeline.py's `Serving`): closed and recorded once it is sent."""

    async def close(self, failure: GatewayError | None, cancelled: bool, final: bool = True) -> Any: ...


async def _until_disconnect(receive: Callable[[], Awaitable[Message]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


# How long a request runs before a watcher starts listening for its client to hang up. Most requests
# end sooner, and a watcher task per request costs ~3% of a JSON request's CPU; one that hangs up
# earlier is still noticed, WATCH_AFTER_S after it began (its upstream runs that much longer).
WATCH_AFTER_S = 0.05


async def unless_disconnected(work: Coroutine[Any, Any, Response],
                              receive: Callable[[], Awaitable[Message]]) -> Response:
    """Run `work` in this task, abandoning it (and so its upstream request) when the client hangs up.

    `work` runs in the current task, not a new one, so dispatch starts (and counts itself in flight)
    before any other request is planned: a burst of requests sees each other's load."""
    task = asyncio.current_task()
    assert task is not None
    gone = False
    watcher: asyncio.Future[None] | None = None

    async def watch() -> None:
        nonlocal gone
        await _until_disconnect(receive)
        gone = True
        task.cancel()

    def start_watching() -> None:
        nonlocal watcher
        watcher = asyncio.ensure_future(watch())

    timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start_watching)
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()
        return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()


# A stream's own headers, after the request's (`EventStream`): as Starlette would encode them.
_EVENT_STREAM_HEADERS = [(b"cache-control", b"no-cache"), (b"content-type", b"text/event-stream; charset=utf-8")]


class EventStream(StreamingResponse):
    """A `StreamingResponse` whose body is sent from the request's own task, abandoned (and so its
    upstream closed) when the client hangs up: `unless_disconnected` watches for that, as it does
    before the response starts. Starlette's own way -- an anyio task group per response, since
    uvicorn speaks ASGI 2.3 -- cost ~8% of a stream's CPU."""

    def __init__(self, body: AsyncIterator[bytes], headers: dict[str, str]) -> None:
        # What `StreamingResponse(body, headers=headers, media_type="text/event-stream")` sets, with
        # `cache-control: no-cache`; made here, on the way to the first token: Starlette's checks
        # (an ABC isinstance, header scans) are for arguments that may be anything.
        self.body_iterator = body
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        self.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
        self.raw_headers += _EVENT_STREAM_HEADERS

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def body() -> Response:
            await self.stream_response(send)
            return self

        await unless_disconnected(body(), receive)


class JsonAnswer(Response):
    """A JSON response that, once sent (or once sending failed), closes and records the attempt that
    served it: recording is not on the client's path to its answer."""

    def __init__(self, content: bytes, headers: dict[str, str], serving: Closes) -> None:
        super().__init__(content, media_type="application/json", headers=headers)
        self.serving = serving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.serving.close(None, cancelled=False)
