"""Tests of gateway.simulator.http11: framing, keep-alive, pipelining, cancellation, listener."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from gateway.simulator.http11 import HttpConnection, HttpListener, Request


class Recorder:
    """A handler that echoes the request and can stream, hang or abort on demand."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()
        self.seen: list[Request] = []

    async def __call__(self, req: Request, conn: HttpConnection) -> None:
        self.seen.append(req)
        if req.path == "/hang":
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        elif req.path == "/stream":
            conn.start_stream(200, first_chunk=b"one;")
            await asyncio.sleep(0.01)
            conn.write_chunk(b"two;")
            conn.write_chunk(b"three", last=True)
        elif req.path == "/abort":
            conn.start_stream(200, first_chunk=b"partial")
            conn.abort()
        elif req.path == "/forget":
            conn.start_stream(200, first_chunk=b"never ended")
        else:
            body = {"method": req.method, "path": req.path, "query": req.query, "body": req.body.decode()}
            conn.send(200, orjson.dumps(body), [("x-test", "1")])


@pytest.fixture
async def server() -> AsyncIterator[tuple[HttpListener, Recorder]]:
    recorder = Recorder()
    listener = HttpListener(recorder, "127.0.0.1", 0)
    await listener.open()
    yield listener, recorder
    await listener.close()


async def raw_exchange(port: int, data: bytes, until: bytes, timeout: float = 2.0) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    out = b""
    try:
        async with asyncio.timeout(timeout):
            while until not in out:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                out += chunk
    finally:
        writer.close()
    return out


async def test_keep_alive_reuses_one_connection(server: tuple[HttpListener, Recorder]) -> None:
    listener, _ = server
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{listener.port}") as client:
        first = await client.post("/a?x=1", content=b"hello")
        second = await client.get("/b")
        assert len(listener.connections) == 1  # both requests went over one connection
    assert first.json() == {"method": "POST", "path": "/a", "query": "x=1", "body": "hello"}
    assert first.headers["x-test"] == "1"
    assert second.json()["path"] == "/b"
    for _ in range(100):  # the server notices the client's close shortly after
        if not listener.connections:
            break
        await asyncio.sleep(0.01)
    assert not listener.connections


async def test_pipelined_requests_are_answered_in_order(server: tuple[HttpListener, Recorder]) -> None:
    listener, _ = server
    req = b"POST /p%d HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\nok"
    out = await raw_exchange(listener.port, (req % 1) + (req % 2), b'"/p2"')
    assert out.count(b"HTTP/1.1 200 OK") == 2
    assert out.index(b'"/p1"') < out.index(b'"/p2"')


async def test_chunked_request_body_and_expect_continue(server: tuple[HttpListener, Recorder]) -> None:
    listener, _ = server
    head = b"POST /c HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\nexpect: 100-continue\r\n\r\n"
    reader, writer = await asyncio.open_connection("127.0.0.1", listener.port)
    writer.write(head)
    assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 100 Continue")
    writer.write(b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\n\r\n")
    out = await reader.readuntil(b"}")
    writer.close()
    assert b'"body":"abcde"' in out


async def test_streamed_response_is_chunked(server: tuple[HttpListener, Recorder]) -> None:
    listener, _ = server
    async with httpx.AsyncClient() as client:
        response = await client.get(f"http://127.0.0.1:{listener.port}/stream")
    assert response.headers["transfer-encoding"] == "chunked"
    assert response.text == "one;two;three"


async def test_abort_and_unfinished_response_close_the_connection(
    server: tuple[HttpListener, Recorder],
) -> None:
    listener, _ = server
    async with httpx.AsyncClient() as client:
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(f"http://127.0.0.1:{listener.port}/abort")
        with pytest.raises(httpx.RemoteProtocolError):
            await client.get(f"http://127.0.0.1:{listener.port}/forget")


async def test_client_disconnect_cancels_the_handler(server: tuple[HttpListener, Recorder]) -> None:
    listener, recorder = server
    async with httpx.AsyncClient(timeout=0.2) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.get(f"http://127.0.0.1:{listener.port}/hang")
    await asyncio.wait_for(recorder.cancelled.wait(), 1.0)


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nbad header\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\ncontent-length: nope\r\n\r\n", b"400"),
        (b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", b"400"),
        (b"GET / HTTP/1.1\r\nx: " + b"a" * 70000, b"431"),
    ],
)
async def test_malformed_requests_get_an_error(
    server: tuple[HttpListener, Recorder], data: bytes, status: bytes
) -> None:
    listener, _ = server
    out = await raw_exchange(listener.port, data, b"}")
    assert out.startswith(b"HTTP/1.1 " + status)
    assert b"connection: close" in out


async def test_listener_can_refuse_and_listen_again(server: tuple[HttpListener, Recorder]) -> None:
    listener, _ = server
    port = listener.port
    listener.stop_listening()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    assert await listener.open() == port
    async with httpx.AsyncClient() as client:
        assert (await client.get(f"http://127.0.0.1:{port}/x")).status_code == 200


async def test_http10_closes_after_response(server: tuple[HttpListener, Recorder]) -> None:
    listener, _ = server
    out = await raw_exchange(listener.port, b"GET /old HTTP/1.0\r\n\r\n", b"never-present", timeout=2.0)
    assert b"connection: close" in out
    assert out.endswith(b"}")
