"""A provider request sent on aiohttp's pooled connections without aiohttp's per-request machinery.

`ClientSession.post()` rebuilds, for every request, what is the same for every request to one
provider URL: the merged header dict, the auto headers, a `ClientRequest` (about ten `update_*`
steps), a payload object, a `StreamWriter` that serializes the head, and -- on Python < 3.12 -- a
task, started on the next turn of the loop, that writes the body. Measured on a paced stream's way
to its first token (benchmarks/first_write.py): ~245k instructions from `post()` to the write.

`PostTarget` makes that once per provider URL: the head's bytes up to `Content-Length` (what aiohttp
would send: the session's headers, then `Host`, `Accept`, `Accept-Encoding`, `User-Agent` where the
session has none), a template `ClientRequest` (only its connection key and TLS settings are used,
to take a pooled connection or open one), and the `RequestInfo` responses carry. `post()` then takes
a connection from aiohttp's connector, writes head and body in one write at once, and reads the
response with aiohttp's own `ClientResponse.start()`: pooling, parsing, the tuned body reader
(upstreams/aiohttp_tuned.py), release and close are aiohttp's as before.

What it leaves out is what the gateway's requests never use: redirects (never followed), tracing,
middlewares, proxies and netrc (`trust_env=False`), auth parameters. Cookies are aiohttp's business:
a session whose jar holds any (a provider set one) is sent through `ClientSession.post()`, which
sends them back, and cookies a lean request's response sets go into the jar as aiohttp would put them.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import hdrs
from aiohttp.client_exceptions import ClientConnectionResetError
from aiohttp.client_reqrep import RequestInfo
from aiohttp.helpers import TimerNoop
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

_NO_TIMER = TimerNoop()  # the session's total timeout is None: aiohttp's own timer is this no-op
_ILLEGAL = ("\r", "\n", "\x00")


class _Sent:
    """What `ClientResponse` reads of the writer of a request already sent: its size."""

    __slots__ = ("output_size",)

    def __init__(self, output_size: int) -> None:
        self.output_size = output_size


class PostTarget:
    """One provider URL's POST, made once per session and URL: see the module's docstring."""

    __slots__ = ("head", "info", "request", "url")

    def __init__(self, session: aiohttp.ClientSession, url: URL) -> None:
        # aiohttp's own request, made once: the same headers it would send (the session's, then its
        # auto headers), its connection key and TLS settings for the connector.
        self.request = aiohttp.ClientRequest("POST", url, headers=session.headers, data=b"",
                                             loop=asyncio.get_running_loop(), session=session)
        headers = CIMultiDict(self.request.headers)
        headers.popall(hdrs.CONTENT_LENGTH, None)
        headers.setdefault(hdrs.CONTENT_TYPE, "application/octet-stream")  # as aiohttp's send() does
        lines = [f"POST {url.raw_path_qs} HTTP/1.1"]
        for name, value in headers.items():
            if any(c in name or c in value for c in _ILLEGAL):  # as aiohttp's serializer refuses them
                raise ValueError("Newline or carriage return character detected in an HTTP header")
            lines.append(f"{name}: {value}")
        lines.append(f"{hdrs.CONTENT_LENGTH}: ")
        self.head = "\r\n".join(lines).encode("utf-8")
        self.url = url
        self.info = RequestInfo(url, "POST", CIMultiDictProxy(headers), url)


def write_request(protocol: aiohttp.client_proto.ResponseHandler, data: bytes) -> None:
    """The request's one write (head and body). A function of its own: benchmarks/first_write.py
    marks the end of the request's way out here."""
    transport = protocol.transport
    if transport is None or transport.is_closing():
        raise ClientConnectionResetError("Cannot write to closing transport")  # as aiohttp's writer says
    transport.write(data)


async def post(session: aiohttp.ClientSession, target: PostTarget, body: bytes) -> aiohttp.ClientResponse:
    """POST `body` to `target` on `session`'s pool; return once the status line and headers have
    arrived, as `session.post(url, data=body, allow_redirects=False)` does (the same exceptions)."""
    if session.cookie_jar:  # a provider set a cookie: aiohttp's own path sends it back
        return await session.post(target.url, data=body, allow_redirects=False)
    connector = session.connector
    assert connector is not None
    timeout = session.timeout
    try:
        conn = await connector.connect(target.request, traces=[], timeout=timeout)
    except TimeoutError as exc:
        raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host {target.url}") from exc
    try:
        protocol = conn.protocol
        assert protocol is not None
        protocol.set_response_params(
            timer=_NO_TIMER, read_until_eof=True, auto_decompress=session.auto_decompress,
            read_timeout=timeout.sock_read, read_bufsize=session._read_bufsize,
            timeout_ceil_threshold=connector._timeout_ceil_threshold, max_line_size=session._max_line_size,
            max_field_size=session._max_field_size, max_headers=session._max_headers)
        data = b"%s%d\r\n\r\n%s" % (target.head, len(body), body)
        write_request(protocol, data)
        protocol.start_timeout()
        response = session._response_class(
            "POST", target.url, writer=None, continue100=None, timer=_NO_TIMER, request_info=target.info,
            traces=[], loop=asyncio.get_running_loop(), session=session, stream_writer=_Sent(len(data)))  # type: ignore[arg-type]
        try:
            await response.start(conn)
        except BaseException:
            response.close()
            raise
    except OSError as exc:  # as ClientSession does: a socket error is a ClientOSError
        conn.close()
        if isinstance(exc, aiohttp.ClientError) or (exc.errno is None and isinstance(exc, TimeoutError)):
            raise
        raise aiohttp.ClientOSError(*exc.args) from exc
    except BaseException:
        conn.close()
        raise
    if response._raw_cookie_headers:  # kept, as ClientSession keeps them
        session.cookie_jar.update_cookies_from_headers(response._raw_cookie_headers, response.url)
    return response
