"""The provider connection's tuning (gateway/upstreams/aiohttp_tuned.py), over real loopback sockets.

A raw asyncio server writes each answer in the pieces a test chooses, with a pause between them, so
that a piece is (most likely) a network read of its own at the client. Whatever the split, the bytes
read through `Upstreams` are the body sent; and the per-chunk work aiohttp does without the tuning
is not done. These tests also pin the aiohttp internals the tuning relies on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp.client_proto import ResponseHandler
from aiohttp.streams import StreamReader

from gateway.config import Endpoint, build_catalogue, parse_catalogue
from gateway.upstreams.aiohttp_tuned import LeanReader, StreamConnector, connector_class, missing_internals
from gateway.upstreams.client import TRANSPORT_ERRORS, Upstreams

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def sse_events(events: int, size: int = 100) -> list[bytes]:
    return [b"data: " + str(i).encode() + b"x" * size + b"\n\n" for i in range(events)]


def sse_server_response(events: int, size: int = 100) -> bytes:
    """A chunked SSE response, one HTTP chunk per event, as providers send them."""
    body = b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in sse_events(events, size)) + b"0\r\n\r\n"
    return HEAD + body


class RawProvider:
    """Answers the requests of each connection in turn with the next of `answers`, each written as
    its pieces with `pause_s` between them; notes each request's head and counts connections."""

    def __init__(self, answers: list[list[bytes]], pause_s: float = 0.02) -> None:
        self.answers = list(answers)
        self.pause_s = pause_s
        self.heads: list[bytes] = []
        self.connections = 0

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(next(line.split(b":")[1] for line in head.lower().split(b"\r\n")
                                  if line.startswith(b"content-length:")))
                await reader.readexactly(length)
                self.heads.append(head)
                for i, piece in enumerate(self.answers.pop(0)):
                    if i:
                        await asyncio.sleep(self.pause_s)
                    writer.write(piece)
                    await writer.drain()
            await reader.read()  # until the client closes
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @asynccontextmanager
    async def upstreams(
        self, connector: type[aiohttp.TCPConnector] = StreamConnector, host: str = "127.0.0.1"
    ) -> AsyncIterator[tuple[Upstreams, Endpoint]]:
        """`host`: how the provider's URL names the server (which listens on 127.0.0.1)."""
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        file = parse_catalogue({"providers": {"raw": {"base_url": f"http://{host}:{port}/v1"}},
                                "models": {"m": {"endpoints": [{"provider": "raw", "model": "up",
                                                                "price": {"input": 1, "output": 1}}]}}}, "test")
        catalogue = build_catalogue(file, "test", {})
        upstreams = Upstreams(catalogue.providers, connector_class=connector)
        try:
            async with asyncio.timeout(10):
                yield upstreams, catalogue.models["m"][0]
        finally:
            await upstreams.aclose()
            server.close()


async def read_body(upstreams: Upstreams, endpoint: Endpoint, read_after_s: float = 0.0) -> tuple[bytes, type]:
    """One request's body, read as the relay reads it, and the class of the reader that held it."""
    response = await upstreams.open(endpoint, b"{}")
    await asyncio.sleep(read_after_s)
    body = b"".join([part async for part in response.aiter_raw()])
    reader = type(response._response.content)  # type: ignore[attr-defined]
    await response.aclose()
    return body, reader


async def stream_from_raw_server(response: bytes, read_after_s: float = 0.0,
                                 heads: list[bytes] | None = None) -> bytes:
    """Read a stream through `Upstreams` from a loopback server that writes `response` at once (after
    `read_after_s`, so that a large one fills the client's buffer first). The request's head is
    appended to `heads`."""
    provider = RawProvider([[response]])
    async with provider.upstreams() as (upstreams, endpoint):
        body, _ = await read_body(upstreams, endpoint, read_after_s)
    if heads is not None:
        heads.extend(provider.heads)
    return body


WHOLE = sse_server_response(30)
AFTER_HEAD = len(HEAD)
SPLITS = {
    "at once": [WHOLE],
    "head, then body": [WHOLE[:AFTER_HEAD], WHOLE[AFTER_HEAD:]],
    "head in two, then body": [WHOLE[:20], WHOLE[20:AFTER_HEAD], WHOLE[AFTER_HEAD:]],
    "head's last line split": [WHOLE[:AFTER_HEAD - 2], WHOLE[AFTER_HEAD - 2:]],
    "head and part of the body": [WHOLE[:AFTER_HEAD + 500], WHOLE[AFTER_HEAD + 500:]],
    "an event a read": [WHOLE[:AFTER_HEAD + 3], *(WHOLE[i:i + 111] for i in range(AFTER_HEAD + 3, len(WHOLE), 111))],
}


@pytest.mark.parametrize("split", list(SPLITS))
async def test_a_body_is_read_whole_however_its_reads_split(split: str) -> None:
    provider = RawProvider([SPLITS[split]])
    async with provider.upstreams() as (upstreams, endpoint):
        body, reader = await read_body(upstreams, endpoint)
    assert body == b"".join(sse_events(30))
    if split != "head's last line split":  # a blank line that straddles two reads is found in neither:
        assert reader is LeanReader         # the body is read by aiohttp's own reader (a rare split)


async def test_no_work_is_done_per_http_chunk_beyond_taking_its_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp's reader records every HTTP chunk's end, takes the buffered chunks one by one, and
    asks after each for reading to resume, which re-ran the HTTP parser on no data. None of that is
    done: the 40 events come in one join."""
    calls = {"chunk end": 0, "chunk taken": 0, "parser rerun": 0}
    chunk_end, take_chunk, received = (StreamReader.end_http_chunk_receiving, StreamReader._read_nowait_chunk,
                                       ResponseHandler.data_received)

    def counting_end(self: StreamReader) -> None:
        calls["chunk end"] += 1
        chunk_end(self)

    def counting_take(self: StreamReader, n: int) -> bytes:
        calls["chunk taken"] += 1
        return take_chunk(self, n)

    def counting_received(self: ResponseHandler, data: bytes) -> None:
        calls["parser rerun"] += not data
        received(self, data)

    monkeypatch.setattr(StreamReader, "end_http_chunk_receiving", counting_end)
    monkeypatch.setattr(StreamReader, "_read_nowait_chunk", counting_take)
    monkeypatch.setattr(ResponseHandler, "data_received", counting_received)
    received_body = await stream_from_raw_server(sse_server_response(40))
    assert received_body.count(b"data: ") == 40
    assert calls == {"chunk end": 0, "chunk taken": 0, "parser rerun": 0}  # aiohttp's own: 40 of each


async def test_each_answer_on_a_kept_alive_connection_gets_a_lean_reader() -> None:
    provider = RawProvider([[WHOLE], SPLITS["head, then body"], [sse_server_response(3)]])
    async with provider.upstreams() as (upstreams, endpoint):
        results = [await read_body(upstreams, endpoint) for _ in range(3)]
    assert [body for body, _ in results] == [b"".join(sse_events(30))] * 2 + [b"".join(sse_events(3))]
    assert {reader for _, reader in results} == {LeanReader}
    assert provider.connections == 1


async def test_a_stream_that_fills_the_buffer_still_resumes() -> None:
    """A stream read more slowly than it arrives pauses the transport at aiohttp's high water mark;
    reading must resume it (aiohttp's own path), or the rest would never come."""
    received = await stream_from_raw_server(sse_server_response(4000, size=400), read_after_s=0.3)
    assert received.count(b"data: ") == 4000


async def test_a_sized_body_is_read_whole() -> None:
    """A provider's error comes as JSON with a content-length; the gateway reads it with `aread()`."""
    error = b'{"error": {"message": "overloaded", "code": 503}}'
    head = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
    provider = RawProvider([[head % len(error) + error[:10], error[10:]]])
    async with provider.upstreams() as (upstreams, endpoint):
        response = await upstreams.open(endpoint, b"{}")
        assert response.status_code == 503 and await response.aread() == error
        await response.aclose()


async def test_a_malformed_head_fails_the_request_as_a_connection_error() -> None:
    provider = RawProvider([[b"HTTP/1.1 200 OK\r\nno colon in this header\r\n\r\n" + b"5\r\nhello\r\n0\r\n\r\n"]])
    async with provider.upstreams() as (upstreams, endpoint):
        with pytest.raises(TRANSPORT_ERRORS):
            await upstreams.open(endpoint, b"{}")


def chunked(events: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events)


async def test_read_now_takes_what_has_arrived_and_says_when_a_read_would_wait() -> None:
    """`read_now()`: the bytes buffered, None while more is on its way, b"" at the end."""
    events = sse_events(4)
    provider = RawProvider([[HEAD + chunked(events[:2]), chunked(events[2:]) + b"0\r\n\r\n"]], pause_s=0.2)
    async with provider.upstreams() as (upstreams, endpoint):
        response = await upstreams.open(endpoint, b"{}")
        await asyncio.sleep(0.05)  # the server's pause is longer: timers of one loop fire in order
        assert response.read_now() == events[0] + events[1]
        assert response.read_now() is None  # the rest is 0.15 s away: a read would wait
        rest = b"".join([part async for part in response.aiter_raw()])
        assert rest == events[2] + events[3]
        assert response.read_now() == b""
        await response.aclose()


def test_this_aiohttp_has_every_internal_the_tuning_needs(caplog: pytest.LogCaptureFixture) -> None:
    assert missing_internals() == []
    with caplog.at_level(logging.WARNING):
        assert connector_class() is StreamConnector
    assert caplog.records == []


def test_an_aiohttp_without_them_gets_the_stock_classes_and_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """aiohttp before 3.14 has `resume_reading()` with no `resume_parser`: the tuned protocol's call
    would raise a TypeError the first time a stream filled its buffer."""
    def old_resume_reading(self: ResponseHandler) -> None:
        pass

    monkeypatch.setattr(ResponseHandler, "resume_reading", old_resume_reading)
    monkeypatch.setattr(StreamReader, "__slots__", tuple(n for n in StreamReader.__slots__ if n != "_cursor"))
    with caplog.at_level(logging.WARNING):
        assert connector_class() is aiohttp.TCPConnector
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "ResponseHandler.resume_reading(resume_parser)" in warnings[0]
    assert "StreamReader._cursor" in warnings[0]


async def test_the_stock_classes_read_a_stream_that_fills_the_buffer() -> None:
    provider = RawProvider([[sse_server_response(4000, size=400)]])
    async with provider.upstreams(aiohttp.TCPConnector) as (upstreams, endpoint):
        body, reader = await read_body(upstreams, endpoint, read_after_s=0.3)
    assert body.count(b"data: ") == 4000
    assert reader is StreamReader
