"""A load generator much cheaper than what it measures: raw asyncio keep-alive HTTP/1.1 connections.

An httpx client costs milliseconds of CPU per request on a slow core, more than the gateway; this one
sends prebuilt request bytes and parses only the status line, the framing (content-length or chunked)
and the end of the body. `run(port, path, body, concurrency, total)` keeps `concurrency` connections
busy until `total` requests are done and returns each request's latency and time to first body byte
(for a stream, the first chunk: the first token through the gateway), and the number of errors.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field


@dataclass
class Result:
    latency_s: list[float] = field(default_factory=list)
    first_byte_s: list[float] = field(default_factory=list)
    errors: int = 0
    wall_s: float = 0.0


class _Connection(asyncio.Protocol):
    """One keep-alive connection; `request()` sends and resolves when the whole response is in."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.done: asyncio.Future[tuple[int, float]] | None = None
        self.lost = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("connection closed"))

    def request(self, data: bytes) -> asyncio.Future[tuple[int, float]]:
        self.buffer = b""
        self.status = 0
        self.body_at = -1  # offset where the body starts, once the head is in
        self.chunked = False
        self.length = 0
        self.scan = 0  # chunked: offset of the next chunk's size line
        self.first = 0.0
        self.done = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.transport.write(data)
        return self.done

    def data_received(self, data: bytes) -> None:
        buffer = self.buffer = self.buffer + data
        if self.body_at < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = buffer[:end].lower()
            self.status = int(head[9:12])
            self.body_at = self.scan = end + 4
            self.chunked = b"transfer-encoding: chunked" in head
            if not self.chunked:
                at = head.find(b"content-length:")
                stop = head.find(b"\r\n", at)
                self.length = int(head[at + 15:stop if stop >= 0 else None])
        if len(buffer) > self.body_at and not self.first:
            self.first = time.perf_counter()
        if self.chunked:
            while True:
                line_end = buffer.find(b"\r\n", self.scan)
                if line_end < 0:
                    return
                size = int(buffer[self.scan:line_end], 16)
                if size == 0:
                    if len(buffer) >= line_end + 4:
                        break
                    return
                nxt = line_end + 2 + size + 2
                if len(buffer) < nxt:
                    return
                self.scan = nxt
        elif len(buffer) < self.body_at + self.length:
            return
        if self.done is not None and not self.done.done():
            self.done.set_result((self.status, self.first))


def request_bytes(path: str, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    return (f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{extra}\r\n").encode() + body


async def run(port: int, data: bytes, concurrency: int, total: int, warmup: int = 20) -> Result:
    """Send `data` `total` times over `concurrency` connections (after `warmup` unmeasured ones)."""
    loop = asyncio.get_running_loop()
    result = Result()
    conns = [(await loop.create_connection(_Connection, "127.0.0.1", port))[1] for _ in range(concurrency)]
    for i in range(warmup):
        await conns[i % concurrency].request(data)
    left = iter(range(total))

    async def worker(conn: _Connection) -> None:
        for _ in left:
            start = time.perf_counter()
            try:
                status, first = await asyncio.wait_for(conn.request(data), 30)
            except (ConnectionError, TimeoutError):
                result.errors += 1
                return  # this connection is done for; the others finish the run
            end = time.perf_counter()
            if status != 200:
                result.errors += 1
            result.latency_s.append(end - start)
            result.first_byte_s.append(first - start)

    began = time.perf_counter()
    await asyncio.gather(*(worker(c) for c in conns))
    result.wall_s = time.perf_counter() - began
    for conn in conns:
        assert conn.transport is not None
        conn.transport.close()
    return result
