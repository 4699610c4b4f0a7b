"""A tiny HTTP/1.1 server on raw asyncio protocols, just enough for the simulator.

Does: parse requests (request line, headers, `Content-Length` or chunked bodies, keep-alive,
pipelining one request at a time), hand each complete request to an async handler running in its
own task, and give that handler primitives to answer: a whole response with Content-Length, or a
chunked stream written chunk by chunk, or an abort (RST) of the connection. When the client
disconnects, the handler task is cancelled at once, so a request waiting or hanging notices.
Can stop accepting (close the listener) and start again on the same port.
Does not: TLS, HTTP/2, trailers, multipart, routing, or any OpenAI logic (see `endpoint.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import cast

import orjson

log = logging.getLogger(__name__)

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(slots=True)
class Request:
    """One parsed request. `arrived` is `loop.time()` when its last byte was read."""

    method: str
    path: str
    query: str
    version: str
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value
    body: bytes
    arrived: float

    @property
    def keep_alive(self) -> bool:
        conn = self.headers.get("connection", "").lower()
        if self.version == "HTTP/1.0":
            return "keep-alive" in conn
        return "close" not in conn


Handler = Callable[[Request, "HttpConnection"], Awaitable[None]]


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Unknown"


def _head(status: int, headers: list[tuple[str, str]], close: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {_reason(status)}"]
    lines.extend(f"{name}: {value}" for name, value in headers)
    if close:
        lines.append("connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def _parse_chunked(buf: bytearray) -> tuple[bytes, int] | None:
    """Decode a complete chunked body at the start of `buf`: (body, bytes consumed) or None."""
    pos = 0
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size_text = bytes(buf[pos:eol]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise _BadRequest(400, "invalid chunk size") from None
        pos = eol + 2
        if size == 0:
            # Skip (and ignore) trailers up to the empty line that ends the body.
            while True:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    return None
                if eol == pos:
                    return bytes(out), eol + 2
                pos = eol + 2
        if len(buf) < pos + size + 2:
            return None
        out += buf[pos : pos + size]
        if len(out) > MAX_BODY_BYTES:
            raise _BadRequest(413, "request body too large")
        pos += size + 2


class HttpConnection(asyncio.Protocol):
    """One client connection. Handles one request at a time; keeps the connection alive."""

    def __init__(self, handler: Handler, registry: set[HttpConnection]) -> None:
        self._handler = handler
        self._registry = registry
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._head_parsed: tuple[str, str, str, dict[str, str]] | None = None
        self._sent_continue = False
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._paused = False
        self._drain_waiter: asyncio.Future[None] | None = None
        self._close_after = False
        self._started = False  # response head sent for the current request
        self._finished = False  # response fully sent for the current request

    # ---- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have the same methods.
        self._transport = cast(asyncio.Transport, transport)
        self._registry.add(self)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._task is None:
            self._next_request()

    def eof_received(self) -> bool | None:
        # A half-closed client has given up as far as we are concerned: close, which cancels.
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._registry.discard(self)
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._wake_drain()

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._paused = False
        self._wake_drain()

    # ---- state --------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def paused(self) -> bool:
        """True while the client is not reading fast enough (the kernel buffer is full)."""
        return self._paused

    @property
    def busy(self) -> bool:
        """True while a request is being handled."""
        return self._task is not None

    # ---- response primitives for handlers ------------------------------------------------------

    def send(
        self,
        status: int,
        body: bytes,
        headers: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        close: bool = False,
    ) -> None:
        """Send a whole response with Content-Length. `close` closes the connection after it."""
        if close:
            self._close_after = True
        hdrs = [("content-type", content_type), ("content-length", str(len(body))), *(headers or [])]
        self._write(_head(status, hdrs, self._close_after) + body)
        self._started = self._finished = True

    def start_stream(
        self,
        status: int,
        headers: list[tuple[str, str]] | None = None,
        content_type: str = "text/event-stream",
        first_chunk: bytes = b"",
        last: bool = False,
        close: bool = False,
    ) -> None:
        """Send the head of a chunked response, optionally with its first chunk in the same write.

        `last` also ends the body in that same write (a one-shot stream).
        """
        if close:
            self._close_after = True
        hdrs = [
            ("content-type", content_type),
            ("cache-control", "no-cache"),
            ("transfer-encoding", "chunked"),
            *(headers or []),
        ]
        data = _head(status, hdrs, self._close_after)
        if first_chunk:
            data += b"%x\r\n%b\r\n" % (len(first_chunk), first_chunk)
        if last:
            data += b"0\r\n\r\n"
        self._write(data)
        self._started = True
        self._finished = last

    def write_chunk(self, data: bytes, last: bool = False) -> None:
        """One chunk (one socket write); `last` also ends the body in the same write."""
        out = b"%x\r\n%b\r\n" % (len(data), data) if data else b""
        if last:
            out += b"0\r\n\r\n"
            self._finished = True
        if out:
            self._write(out)

    def abort(self) -> None:
        """Reset the connection now (the client sees an incomplete response)."""
        self._close_after = True
        if self._transport is not None:
            self._transport.abort()

    async def drain(self) -> None:
        """Wait while the kernel buffer is full (a slow reader); returns at once otherwise."""
        if not self._paused or self._closed:
            return
        self._drain_waiter = self._loop.create_future()
        await self._drain_waiter

    def close(self) -> None:
        """Close gracefully (pending writes are flushed first)."""
        if self._transport is not None and not self._closed:
            self._transport.close()

    def close_if_idle(self) -> None:
        if self._task is None:
            self.close()

    # ---- internals ----------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if not self._closed and self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def _wake_drain(self) -> None:
        if self._drain_waiter is not None and not self._drain_waiter.done():
            self._drain_waiter.set_result(None)
        self._drain_waiter = None

    def _next_request(self) -> None:
        if self._closed:
            return
        try:
            request = self._parse()
        except _BadRequest as err:
            body = orjson.dumps(
                {"error": {"message": str(err), "type": "invalid_request_error", "param": None, "code": None}}
            )
            self.send(err.status, body, close=True)
            self.close()
            return
        if request is None:
            return
        self._started = self._finished = False
        self._close_after = not request.keep_alive
        self._task = self._loop.create_task(self._handler(request, self))
        self._task.add_done_callback(self._on_done)

    def _on_done(self, task: asyncio.Task[None]) -> None:
        self._task = None
        if not task.cancelled() and task.exception() is not None:
            log.error("simulator handler failed", exc_info=task.exception())
            if not self._started:
                self.send(500, b'{"error": {"message": "simulator bug", "type": "server_error"}}')
        if self._closed:
            return
        if not self._finished or self._close_after:
            # An unfinished response cannot be followed by another on this connection.
            self.close()
            return
        if self._buf:
            self._next_request()

    def _parse(self) -> Request | None:
        if self._head_parsed is None:
            while self._buf.startswith(b"\r\n"):  # tolerated between pipelined requests
                del self._buf[:2]
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                if len(self._buf) > MAX_HEAD_BYTES:
                    raise _BadRequest(431, "request head too large")
                return None
            lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
            del self._buf[: end + 4]
            parts = lines[0].split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                raise _BadRequest(400, "bad request line")
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, sep, value = line.partition(":")
                if not sep:
                    raise _BadRequest(400, "bad header line")
                headers[name.strip().lower()] = value.strip()
            self._head_parsed = (parts[0].upper(), parts[1], parts[2], headers)
            self._sent_continue = False
        method, target, version, headers = self._head_parsed
        if "chunked" in headers.get("transfer-encoding", "").lower():
            decoded = _parse_chunked(self._buf)
            if decoded is None:
                self._maybe_continue(headers)
                return None
            body, used = decoded
            del self._buf[:used]
        else:
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError:
                raise _BadRequest(400, "bad content-length") from None
            if length < 0 or length > MAX_BODY_BYTES:
                raise _BadRequest(413, "request body too large")
            if len(self._buf) < length:
                self._maybe_continue(headers)
                return None
            body = bytes(self._buf[:length])
            del self._buf[:length]
        self._head_parsed = None
        path, _, query = target.partition("?")
        return Request(method, path, query, version, headers, body, self._loop.time())

    def _maybe_continue(self, headers: dict[str, str]) -> None:
        if not self._sent_continue and headers.get("expect", "").lower() == "100-continue":
            self._sent_continue = True
            self._write(b"HTTP/1.1 100 Continue\r\n\r\n")


class HttpListener:
    """A listening socket plus its connections; can stop listening and listen again on the port."""

    def __init__(self, handler: Handler, host: str, port: int) -> None:
        self._handler = handler
        self.host = host
        self.port = port  # the requested port until `open()`, then the bound one
        self.connections: set[HttpConnection] = set()
        self._server: asyncio.AbstractServer | None = None

    @property
    def listening(self) -> bool:
        return self._server is not None

    async def open(self) -> int:
        """Start listening (no-op if already); returns the bound port."""
        if self._server is None:
            loop = asyncio.get_running_loop()
            self._server = await loop.create_server(
                lambda: HttpConnection(self._handler, self.connections),
                self.host,
                self.port,
                reuse_address=True,
                backlog=2048,
            )
            sockets = self._server.sockets or ()
            if sockets:
                self.port = int(sockets[0].getsockname()[1])
        return self.port

    async def bind_only(self) -> int:
        """Resolve port 0 to a concrete port without serving (for endpoints that start refused)."""
        if self.port == 0:
            await self.open()
            self.stop_listening()
        return self.port

    def stop_listening(self) -> None:
        """Close the listening socket so new connections are refused; existing ones live on."""
        if self._server is not None:
            self._server.close()
            self._server = None

    def close_idle(self) -> None:
        for conn in list(self.connections):
            conn.close_if_idle()

    async def close(self) -> None:
        """Stop listening and abort every connection (in-flight handlers get cancelled)."""
        self.stop_listening()
        for conn in list(self.connections):
            conn.abort()
        # Let connection_lost callbacks run so handler tasks see their cancellation.
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
