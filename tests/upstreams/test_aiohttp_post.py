"""A provider request sent without aiohttp's per-request machinery (gateway/upstreams/aiohttp_post.py),
over real loopback sockets: the same request on the wire as `ClientSession.post()` sends, on the
same pooled connections, with aiohttp's errors and cookies; and no `ClientRequest` built per request."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import aiohttp
import pytest
from yarl import URL

from gateway.upstreams.aiohttp_post import PostTarget
from gateway.upstreams.client import CONNECT_ERRORS, TRANSPORT_ERRORS, Upstreams
from tests.upstreams.test_aiohttp_tuned import HEAD, RawProvider, read_body, sse_events, sse_server_response


def header_lines(head: bytes) -> tuple[bytes, set[bytes]]:
    """A request head's request line and its header lines (names lower-cased; order aside)."""
    first, *lines = head.rstrip(b"\r\n").split(b"\r\n")
    return first, {name.lower() + b":" + value for name, _, value in (line.partition(b":") for line in lines)}


async def test_the_request_on_the_wire_is_the_one_aiohttp_sends() -> None:
    heads: dict[str, bytes] = {}
    for name, connector in (("lean", None), ("aiohttp", aiohttp.TCPConnector)):
        provider = RawProvider([[sse_server_response(3)]])
        async with provider.upstreams(*([connector] if connector else [])) as (upstreams, endpoint):
            body, _ = await read_body(upstreams, endpoint)
        assert body == b"".join(sse_events(3))
        heads[name] = provider.heads[0]
    (first, lines), (aiohttp_first, aiohttp_lines) = header_lines(heads["lean"]), header_lines(heads["aiohttp"])
    assert first == aiohttp_first == b"POST /v1/chat/completions HTTP/1.1"
    hosts = {line for line in lines | aiohttp_lines if line.startswith(b"host:")}  # (two servers, two ports)
    assert len(hosts) == 2 and all(line.startswith(b"host: 127.0.0.1:") for line in hosts)
    assert lines - hosts == aiohttp_lines - hosts
    assert b"content-length: 2" in lines and b"accept-encoding: identity" in lines


async def test_no_aiohttp_request_is_built_per_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """aiohttp builds a ClientRequest (ten update steps, a payload, a writer) for every request;
    the gateway builds one per provider URL, and the requests share one kept-alive connection."""
    built = []
    init = aiohttp.ClientRequest.__init__

    def counting(self: aiohttp.ClientRequest, *args: object, **kwargs: object) -> None:
        built.append(self)
        init(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(aiohttp.ClientRequest, "__init__", counting)
    provider = RawProvider([[sse_server_response(2)] for _ in range(3)])
    async with provider.upstreams() as (upstreams, endpoint):
        for _ in range(3):
            body, _ = await read_body(upstreams, endpoint)
            assert body == b"".join(sse_events(2))
    assert len(built) == 1  # aiohttp's own: 3
    assert provider.connections == 1


async def test_a_cookie_a_provider_sets_is_sent_back() -> None:
    """(By a host name: aiohttp's jar keeps no cookie of an IP address.)"""
    set_cookie = HEAD.replace(b"\r\n\r\n", b"\r\nset-cookie: lb=abc; Path=/\r\n\r\n")
    answer = sse_server_response(1)
    provider = RawProvider([[set_cookie + answer[len(HEAD):]], [answer]])
    async with provider.upstreams(host="localhost") as (upstreams, endpoint):
        for _ in range(2):
            await read_body(upstreams, endpoint)
    assert b"cookie:lb=abc" not in header_lines(provider.heads[0])[1]
    assert b"cookie: lb=abc" in header_lines(provider.heads[1])[1]


async def test_headers_of_one_request_are_sent_with_it() -> None:
    provider = RawProvider([[sse_server_response(1)]])
    async with provider.upstreams() as (upstreams, endpoint):
        response = await upstreams.open(endpoint, b"{}", headers={"anthropic-beta": "fast"})
        await response.aread()
        await response.aclose()
    assert b"anthropic-beta: fast" in header_lines(provider.heads[0])[1]


async def test_a_provider_that_hangs_up_is_a_transport_error_and_the_next_request_reconnects() -> None:
    provider = RawProvider([[sse_server_response(1)]])
    serve = provider._serve

    async def hang_up_first(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if not provider.connections:  # the first connection: its request read, then closed unanswered
            provider.connections += 1
            await reader.readuntil(b"\r\n\r\n")
            writer.close()
            return
        await serve(reader, writer)

    provider._serve = hang_up_first  # type: ignore[method-assign]
    async with provider.upstreams() as (upstreams, endpoint):
        with pytest.raises(TRANSPORT_ERRORS):
            await upstreams.open(endpoint, b"{}")
        body, _ = await read_body(upstreams, endpoint)
    assert body == b"".join(sse_events(1))
    assert provider.connections == 2


async def test_an_unreachable_provider_is_a_connect_error() -> None:
    async with RawProvider([]).upstreams() as (_, endpoint):
        pass  # the server is closed on leaving: nothing listens at its port any more
    provider = endpoint.provider
    upstreams = Upstreams({provider.name: provider})
    try:
        with pytest.raises(CONNECT_ERRORS):
            await upstreams.open(endpoint, b"{}")
    finally:
        await upstreams.aclose()


async def test_a_header_that_would_break_the_head_is_refused() -> None:
    """A header value with a line break would add a header (or a request) of its own: refused, as
    aiohttp's serializer refuses it."""
    async with aiohttp.ClientSession(headers={"x-team": "a\r\nx-admin: 1"}) as session:
        with pytest.raises(ValueError, match="Newline"):
            PostTarget(session, URL("http://127.0.0.1:9/v1/chat/completions"))


async def test_with_every_connection_busy_a_request_waits_no_longer_than_the_connect_timeout() -> None:
    """`connect_timeout_s` bounds the wait for a free pooled connection too, as ClientSession's
    `connect` timeout does: the attempt fails over rather than waiting for a stream to end."""
    answer = sse_server_response(1)
    provider = RawProvider([[answer[:len(HEAD)], answer[len(HEAD):]]], pause_s=30)  # the body comes late
    async with provider.upstreams() as (_, endpoint):
        tight = replace(endpoint.provider, max_connections=1, connect_timeout_s=0.3)
        endpoint = replace(endpoint, provider=tight)
        upstreams = Upstreams({tight.name: tight})
        try:
            first = await upstreams.open(endpoint, b"{}")  # holds the only connection
            second = asyncio.create_task(upstreams.open(endpoint, b"{}"))
            done, _ = await asyncio.wait({second}, timeout=5)
            assert second in done, "still waiting for a connection after 5 s"
            with pytest.raises(CONNECT_ERRORS):
                second.result()
            await first.aclose()
        finally:
            await upstreams.aclose()
