"""The Responses WebSocket: `GET /v1/responses` upgraded, one connection for many responses.

OpenAI's "WebSocket mode" (the openai SDK's `client.responses.connect()`, Codex's provider setting
`supports_websockets = true`): the client sends `response.create` frames, each the body of a
`POST /v1/responses` (`stream` is implied), and gets the same Responses events back, one JSON text
frame per event. Each response goes through the one pipeline as an HTTP request does: parsed by the
Responses adapter, planned by `pipeline.prepare` (the key's model list, limits and budget; routing),
served and recorded by `pipeline.serve_events` (fallback, metrics, one access-log line per response
with `"transport": "websocket"`).

    upgrade          authenticated by its `Authorization: Bearer` (or `x-api-key`) header, as HTTP
                     requests are; refused with that HTTP error instead of 101 (401, 503 draining)
    response.create  one response at a time; another while one runs gets an `error` event. Its
                     `stream_id` (the SDK's lanes) is echoed on every event of that response
    previous_response_id  the connection's own last response is continued from memory, with
                     `store: false` too (its input and output items are kept until the next one);
                     any other id is read from the session store, as over HTTP (not found there:
                     404 `previous_response_not_found`, OpenAI's WebSocket code)
    generate: false  a warm-up (Codex sends one): a response with no output and no upstream call,
                     whose input the next `previous_response_id` continues
    errors           `{"type": "error", "status": 400, "error": {type, code, message, param}}`, OpenAI's
                     WebSocket error event (what Codex reads); the connection stays usable
    limits           a frame over `gateway.max_body_bytes` gets an error event (413) and the connection
                     stays; no frame for `websocket_idle_s` while idle: closed 1000; at
                     `websocket_max_age_s`: closed 1000 once the response in flight is done
    SIGTERM (drain)  the response in flight finishes, then 1001; idle connections get 1001 at once;
                     a `response.create` meanwhile gets an error event (503 `shutting_down`)
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import time
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import pipeline
from gateway.apis.adapter import StreamRenderer, sse_event
from gateway.apis.responses import ResponsesApi
from gateway.apis.responses_render import ResponsesCall, new_id, response_object
from gateway.errors import (
    GatewayError,
    InvalidRequest,
    Overloaded,
    PayloadTooLarge,
    ResponseNotFound,
    ShuttingDown,
    error_body,
)
from gateway.parse import check_headers, header_map, parse_json_body
from gateway.serve.drain import Flight

if TYPE_CHECKING:
    from gateway.serve.drain import Drain
    from gateway.serve.overload import Admission
    from gateway.services import Services

log = logging.getLogger("ultraroute")
TRANSPORT = "websocket"
STREAM_ID = re.compile(r"[A-Za-z0-9_.-]{1,256}")  # OpenAI's lane ids
GOING_AWAY = 1001  # RFC 6455: the server is going down
NORMAL = 1000


@dataclass(frozen=True, slots=True)
class Turn:
    """The connection's last response: its id, and the conversation up to it as Responses items (its
    input, earlier turns included, then its output), for a `previous_response_id` that names it."""

    response_id: str
    items: tuple[dict[str, Any], ...]


def event_payloads(data: bytes) -> list[bytes]:
    """The JSON of each server-sent event in `data` (`event: name\\ndata: {...}\\n\\n`...), what the
    renderers give: one WebSocket text frame each."""
    return [block.partition(b"data: ")[2] for block in data.split(b"\n\n") if block]


def error_frame(err: GatewayError) -> bytes:
    return orjson.dumps({"type": "error", "status": err.status, "error": err.error_object()})


class Framed:
    """A Responses renderer whose mid-stream `error` event also carries the WebSocket error fields
    (`status`, `error`), and whose finished response stays readable for the connection's memory."""

    def __init__(self, inner: StreamRenderer) -> None:
        self.inner = inner
        self.failed = False

    def start(self) -> bytes:
        return self.inner.start()

    def feed(self, chunks: list[dict[str, Any]]) -> bytes:
        return self.inner.feed(chunks)

    def finish(self) -> bytes:
        return self.inner.finish()

    def fail(self, err: GatewayError) -> bytes:
        self.failed = True
        out = []
        for payload in event_payloads(self.inner.fail(err)):  # once per failed response: parsing it is cheap
            event = orjson.loads(payload)
            if event.get("type") == "error":
                # The same code as the event's own (the renderer names a code-less failure server_error).
                event.update(status=err.status, error={**err.error_object(), "code": event.get("code", err.code)})
            out.append(sse_event(str(event.get("type")), orjson.dumps(event)))
        return b"".join(out)

    def result(self) -> dict[str, Any] | None:
        return self.inner.result()


def as_items(value: Any) -> list[dict[str, Any]] | None:
    """`input` as a list of items (a string is one user message); None when it is neither (the
    adapter then refuses it)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return value if isinstance(value, list) else None


def warm_up_events(call: ResponsesCall) -> tuple[str, list[bytes]]:
    """`generate: false`: a completed response with no output, no upstream called."""
    response_id, created = new_id("resp"), int(time.time())
    frames = []
    for seq, (kind, status) in enumerate((("response.created", "in_progress"), ("response.in_progress", "in_progress"),
                                          ("response.completed", "completed"))):
        response = response_object(call, response_id, created, status, [], None)
        frames.append(orjson.dumps({"type": kind, "sequence_number": seq, "response": response}))
    return response_id, frames


class Connection:
    """One accepted connection: its reader (the ASGI task) and the response running on it (a task)."""

    def __init__(self, api: ResponsesApi, state: Any, drain: Drain, admission: Admission,
                 headers: dict[str, str], send: Send) -> None:
        self.api = api
        self.state = state  # the app's state: `services` is read per response (a reload replaces it)
        self.drain = drain
        self.admission = admission
        self.headers = headers
        self._send = send
        self.running: asyncio.Task[None] | None = None
        self.last: Turn | None = None
        self.closed = False
        gw = state.services.config.gateway
        self.idle_s = gw.websocket_idle_s
        self.ends_at = time.monotonic() + gw.websocket_max_age_s

    async def send(self, payload: bytes, lane: str | None = None) -> None:
        """One event; with `lane`, the `stream_id` its `response.create` named, as OpenAI echoes it."""
        if lane is not None:  # spliced in, not re-encoded: every event is a non-empty JSON object
            payload = b'{"stream_id":' + orjson.dumps(lane) + b"," + payload[1:]
        await self._send({"type": "websocket.send", "text": payload.decode()})

    async def close(self, code: int, reason: str) -> None:
        if not self.closed:
            self.closed = True
            await self._send({"type": "websocket.close", "code": code, "reason": reason})

    def closing_code(self) -> tuple[int, str] | None:
        if self.drain.draining:
            return GOING_AWAY, "server shutting down"
        if time.monotonic() >= self.ends_at:
            return NORMAL, "maximum connection age reached"
        return None

    async def run(self, receive: Receive) -> None:
        """Read frames until the client leaves or the connection is closed (idle, age, drain)."""
        frame: asyncio.Future[Any] | None = None
        begun: asyncio.Future[Any] | None = asyncio.ensure_future(self.drain.begun.wait())
        try:
            while not self.closed:
                idle = self.running is None
                if idle and (ending := self.closing_code()) is not None:
                    await self.close(*ending)
                    break
                frame = frame or asyncio.ensure_future(receive())
                waits: set[asyncio.Future[Any]] = {frame, *(w for w in (begun, self.running) if w is not None)}
                age_left = self.ends_at - time.monotonic()
                timeout = min(self.idle_s, age_left) if idle else None
                done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if begun in done:
                    begun = None  # the loop's next turn closes an idle connection; a busy one closes after
                if frame in done:
                    message, frame = frame.result(), None
                    if message["type"] == "websocket.disconnect":
                        break
                    raw = message.get("bytes") or (message.get("text") or "").encode()
                    await self.on_frame(raw)
                elif not done and idle:  # which deadline it was: a timer may fire a little early
                    await self.close(NORMAL, "maximum connection age reached" if age_left <= self.idle_s
                                     else "idle timeout")
        finally:
            for waiting in (frame, begun):
                if waiting is not None:
                    waiting.cancel()
            if self.running is not None:  # the client left: its upstream is closed, the attempt recorded
                self.running.cancel()
                await asyncio.gather(self.running, return_exceptions=True)

    async def on_frame(self, raw: bytes) -> None:
        services: Services = self.state.services
        request_id = f"{random.getrandbits(96):024x}"
        limits = services.config.gateway
        lane: str | None = None
        try:
            if len(raw) > limits.max_body_bytes:
                raise PayloadTooLarge(f"Frame is {len(raw)} bytes; the limit is {limits.max_body_bytes}.")
            body = parse_json_body(raw, limits)
            kind = body.pop("type", None)
            if kind == "response.processed":
                return  # a client's acknowledgement of a response (Codex): nothing to answer
            if kind != "response.create":
                raise InvalidRequest(f"Unsupported event type {str(kind)[:40]!r}: this gateway takes "
                                     "`response.create`.", param="type", code="unknown_event_type")
            stream_id = body.pop("stream_id", None)
            if stream_id is not None and (not isinstance(stream_id, str) or not STREAM_ID.fullmatch(stream_id)):
                raise InvalidRequest("'stream_id' must be 1-256 ASCII letters, digits, '_', '-' or '.'.",
                                     param="stream_id", code="invalid_stream_id")
            lane = stream_id
            if self.drain.draining:
                raise ShuttingDown("This gateway replica is shutting down; connect again (to another).")
            if self.running is not None:
                raise InvalidRequest("A response is already running on this connection; send the next "
                                     "`response.create` once it has ended.", code="response_in_progress")
            if time.monotonic() >= self.ends_at:
                raise InvalidRequest("Responses websocket connection limit reached "
                                     f"({limits.websocket_max_age_s:g} s). Create a new websocket connection "
                                     "to continue.", code="websocket_connection_limit_reached")
        except GatewayError as err:
            pipeline.count_failure(services, request_id, err, self.api.name, None, TRANSPORT)
            await self.send(error_frame(err), lane)
            return
        # In the drain's count from now, not from the task's first step: a SIGTERM in between waits for it.
        flight = Flight(None)
        self.drain.active.add(flight)
        self.running = flight.task = asyncio.create_task(self.respond(body, request_id, flight, lane))
        self.running.add_done_callback(lambda _: self.drain.active.discard(flight))  # however it ends

    async def respond(self, body: dict[str, Any], request_id: str, flight: Flight, lane: str | None) -> None:
        """One response, in its own task (`flight` in the drain's count until it ends), then the
        connection is closed if it is draining or too old."""
        services: Services = self.state.services
        model: str | None = None
        try:
            if self.admission.in_flight >= self.admission.limit:
                overloaded = Overloaded(self.admission.limit)
                services.metrics.overloaded(self.api.name)
                services.access_log.failed(request_id, overloaded, api=self.api.name, transport=TRANSPORT)
                await self.send(error_frame(overloaded), lane)
                return
            self.admission.in_flight += 1
            try:
                model = body.get("model") if isinstance(body.get("model"), str) else None
                await self.serve(services, body, request_id, lane)
            except GatewayError as err:
                pipeline.count_failure(services, request_id, err, self.api.name, model, TRANSPORT)
                await self.send(error_frame(err), lane)
            finally:
                self.admission.in_flight -= 1
        except asyncio.CancelledError:
            if not flight.cut or flight.task is None:
                raise  # the client left
            flight.task.uncancel()  # the drain's grace is over: say why the events stopped
            cut = ShuttingDown("This gateway replica shut down before the response finished "
                               "(gateway.shutdown_grace_s); retry on another.")
            await self.send(error_frame(cut), lane)
        except OSError:
            return  # the client has gone while we were sending
        except Exception:  # a bug: logged with its traceback, answered, and the connection kept
            log.exception("unhandled error in WebSocket response %s", request_id)
            crashed = GatewayError("Internal error in the gateway.")
            services.access_log.failed(request_id, crashed, model, self.api.name, TRANSPORT)
            await self.send(error_frame(crashed), lane)
        finally:
            self.running = None
            try:
                ending = self.closing_code()
                if ending is not None:  # before leaving the drain's count: the close goes out first
                    await self.close(*ending)
            except OSError:
                pass  # the client has gone too

    async def serve(self, services: Services, body: dict[str, Any], request_id: str, lane: str | None) -> None:
        """Parse, plan, and stream one response; remember it for the next `previous_response_id`."""
        generate = body.pop("generate", True)
        if not isinstance(generate, bool):
            raise InvalidRequest("'generate' must be a boolean.", param="generate")
        body["stream"] = True  # implied: events are the only way out
        last = self.last
        remembered = last is not None and body.get("previous_response_id") == last.response_id
        items = as_items(body["input"]) if "input" in body else [] if remembered else None
        if items is not None:
            # The same conversation a stateless HTTP client would send: history first, then this input.
            items = [*last.items, *items] if remembered and last is not None else items
            body["input"] = items
        client = await services.access.authenticate(self.headers)  # per response: revoked keys stop here
        chat = self.api.parse_body(body, self.headers, request_id, services.config.gateway)
        if not remembered:
            try:
                chat = await self.api.recall(chat, services, client)  # a stored response, as over HTTP
            except ResponseNotFound as err:
                # OpenAI's code on a WebSocket: Codex then sends the whole conversation again.
                err.code = "previous_response_not_found"
                raise
        ctx = pipeline.prepare(chat, self.headers, services, client, admit=generate)._replace(transport=TRANSPORT)
        if not generate:
            response_id, frames = warm_up_events(chat.origin)
            for payload in frames:
                await self.send(payload, lane)
            services.metrics.client_request(self.api.name, 200)
            self.last = Turn(response_id, tuple(items or ()))
            return
        framed: Framed | None = None

        def frame(renderer: StreamRenderer) -> StreamRenderer:
            nonlocal framed
            framed = Framed(renderer)
            return framed

        async with aclosing(pipeline.serve_events(ctx, services, self.api, frame)) as events:
            async for data in events:
                for payload in event_payloads(data):
                    await self.send(payload, lane)
        result = framed.result() if framed is not None and not framed.failed else None
        if result is not None:
            self.last = Turn(result["id"], (*(items or ()), *result["output"]))


async def refuse(scope: Scope, send: Send, err: GatewayError) -> None:
    """An upgrade refused with the HTTP error it would get as a request (ASGI's WebSocket denial
    response); a server without that extension can only answer 403."""
    if "websocket.http.response" not in scope.get("extensions", {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    body = error_body(err)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *((k.encode(), v.encode()) for k, v in err.headers().items())]
    await send({"type": "websocket.http.response.start", "status": err.status, "headers": headers})
    await send({"type": "websocket.http.response.body", "body": body})


def responses_socket(api: ResponsesApi, state: Any, drain: Drain, admission: Admission) -> ASGIApp:
    """The ASGI handler of `GET /v1/responses` upgrades. `state`: the app's (its current `services`)."""

    async def handler(scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        services: Services = state.services
        headers = header_map(scope["headers"])
        try:
            if drain.draining:
                raise ShuttingDown()
            check_headers(headers)
            await services.access.authenticate(headers)  # and again per response: a revoked key stops there
        except GatewayError as err:
            pipeline.count_failure(services, f"{random.getrandbits(96):024x}", err, api.name, None, TRANSPORT)
            await refuse(scope, send, err)
            return
        await send({"type": "websocket.accept"})
        metrics = services.metrics  # kept across reloads: one gauge goes up and down
        metrics.websocket(True)
        try:
            await Connection(api, state, drain, admission, headers, send).run(receive)
        except OSError:
            pass  # the client has gone
        finally:
            metrics.websocket(False)

    return handler

