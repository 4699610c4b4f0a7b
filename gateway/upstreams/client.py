"""The one place that talks HTTP to providers: one pooled aiohttp session per provider.

`Upstreams.open()` sends a chat completion (or, to another `path`, a legacy completion or an embeddings
request) and returns an `UpstreamResponse` with its body unread,
so the caller can stream it. The provider's key is attached here and nowhere else; `redact()` takes
it out of whatever a provider sends back in an error. Timeouts beyond connect are the dispatcher's
business (first-token budget, stall, deadline), not this module's.

Why aiohttp and not httpx: measured on this path (the same stub upstream, 20-chunk streams), an
httpx client costs ~2.5 ms of CPU per request, httpx over aiohttp (`httpx-aiohttp`) ~1 ms, aiohttp
itself ~0.35 ms; httpx's own wrapping was most of the gateway's budget. aiohttp's connector takes an
idle connection from a per-host deque in O(1), so one pool per provider is enough (httpcore scanned
every connection per request, which is why pools used to be sharded). Its connections are tuned for
streams in upstreams/aiohttp_tuned.py, and a request is written on them without aiohttp's per-request
machinery by upstreams/aiohttp_post.py (its head made once per provider URL).

The test seam stays httpx's: given a `transport_factory` (e.g. one returning `httpx.MockTransport`),
`Upstreams` sends through an `httpx.AsyncClient` on that transport instead, and returns the
`httpx.Response`, which has the same `UpstreamResponse` shape. `CONNECT_ERRORS` and
`TRANSPORT_ERRORS` name the exceptions of both clients that mean "could not connect" and "the
connection failed", so callers catch one set.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

import aiohttp
import httpx
from yarl import URL

from gateway.config import Endpoint, Provider
from gateway.upstreams.aiohttp_post import PostTarget, post
from gateway.upstreams.aiohttp_tuned import StreamConnector

TransportFactory = Callable[[Provider], httpx.AsyncBaseTransport]

REDACTED = "[redacted]"
ANTHROPIC_VERSION = "2023-06-01"
# A leading fragment this long already identifies a key; shorter ones ("sk-proj-") are public prefixes.
_KEY_FRAGMENT = 12


def redact(value: Any, provider: Provider) -> Any:
    """`value` -- text, or a parsed JSON error object -- with `provider`'s key taken out.

    Some providers quote the key they were sent in their error messages; those messages are passed
    on to clients and logs, so everything read from a provider's error goes through here first. The
    whole key and any leading fragment of `_KEY_FRAGMENT`+ characters are replaced."""
    if provider.api_key is None or not provider.api_key.get_secret_value():
        return value
    return _scrub(value, provider.api_key.get_secret_value())


def _scrub(value: Any, key: str) -> Any:
    if isinstance(value, str):
        return _scrub_text(value, key)
    if isinstance(value, dict):
        return {_scrub(k, key): _scrub(v, key) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, key) for v in value]
    return value


def _scrub_text(text: str, key: str) -> str:
    probe = key[:_KEY_FRAGMENT]
    out: list[str] = []
    done = 0
    while (start := text.find(probe, done)) >= 0:
        end = start + len(probe)
        while end - start < len(key) and end < len(text) and text[end] == key[end - start]:
            end += 1  # as much more of the key as the text quotes
        out += (text[done:start], REDACTED)
        done = end
    return "".join(out) + text[done:] if out else text


class UpstreamResponse(Protocol):
    """A provider's response, status and headers read, body not yet (both clients' responses fit).
    An aiohttp response also has `read_now()`, which upstreams/stream.py uses where it is present."""

    @property
    def status_code(self) -> int: ...

    @property
    def headers(self) -> Mapping[str, str]: ...  # case-insensitive

    def aiter_raw(self) -> AsyncIterator[bytes]: ...  # the body as it arrives, no decoding

    async def aread(self) -> bytes: ...

    async def aclose(self) -> None: ...


# "Could not connect" (refused, DNS, connect or pool timeout): the endpoint is unreachable, no retry.
CONNECT_ERRORS: tuple[type[BaseException], ...] = (
    httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout,
    aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError,
)
# Any other failure of the connection (reset, closed early, malformed HTTP, broken body).
TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (httpx.HTTPError, aiohttp.ClientError)


class _AiohttpResponse:
    __slots__ = ("_response", "headers", "status_code")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status_code = response.status
        self.headers = response.headers

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._response.content.iter_any()  # whatever each network read brought, in one piece

    def read_now(self) -> bytes | None:
        """What `aiter_raw()` would yield next if it needs no wait: the bytes buffered, or b"" at
        the end; None when a read would wait. Raises what a read would (the connection broke)."""
        content = self._response.content
        data = content.read_nowait()  # everything buffered, b"" if nothing
        if data or content.at_eof():
            return data
        return None

    async def aread(self) -> bytes:
        return await self._response.read()

    async def aclose(self) -> None:
        # A body read to its end gives the connection back to the pool; one cut short closes it, so a
        # provider stops generating for a client that has gone.
        if self._response.content.at_eof():
            self._response.release()
        else:
            self._response.close()


def _headers(provider: Provider) -> dict[str, str]:
    # `accept-encoding: identity`: the relay passes the bytes on as they are. Sent rather than left out
    # through aiohttp's `skip_auto_headers`, which costs a sorted header dict per request.
    headers = {"content-type": "application/json", "accept": "text/event-stream", "accept-encoding": "identity",
               **provider.headers}
    if provider.api == "anthropic":  # Anthropic's own scheme; also what Anthropic-compatible hosts take
        headers.setdefault("anthropic-version", ANTHROPIC_VERSION)
        if provider.api_key is not None:
            headers["x-api-key"] = provider.api_key.get_secret_value()
    elif provider.api_key is not None:
        headers["authorization"] = f"Bearer {provider.api_key.get_secret_value()}"
    return headers


def _session(provider: Provider, connector_class: type[aiohttp.TCPConnector]) -> aiohttp.ClientSession:
    connector = connector_class(limit=provider.max_connections, limit_per_host=0, keepalive_timeout=30.0)
    # sock_read=None: how long a provider may think is decided per attempt by the dispatcher's budgets.
    timeout = aiohttp.ClientTimeout(total=None, connect=provider.connect_timeout_s,
                                    sock_connect=provider.connect_timeout_s, sock_read=None)
    return aiohttp.ClientSession(
        connector=connector, timeout=timeout, headers=_headers(provider),
        trust_env=False,  # no proxy or netrc from the environment
    )


def _test_client(provider: Provider, transport: httpx.AsyncBaseTransport) -> httpx.AsyncClient:
    timeout = httpx.Timeout(connect=provider.connect_timeout_s, read=None, write=30.0,
                            pool=provider.connect_timeout_s)
    return httpx.AsyncClient(base_url=provider.base_url, headers=_headers(provider), timeout=timeout,
                             transport=transport, follow_redirects=False, trust_env=False)


class Upstreams:
    """One pooled aiohttp session per provider (created on first use, inside the event loop) and
    closed at shutdown; or, for tests, httpx clients on the transports `transport_factory` makes.
    `connector_class`: the tuned connector, unless the gateway found at start-up that this aiohttp
    lacks what it needs (upstream_aiohttp.connector_class())."""

    def __init__(
        self, providers: Mapping[str, Provider], transport_factory: TransportFactory | None = None,
        connector_class: type[aiohttp.TCPConnector] = StreamConnector,
    ) -> None:
        self._providers = dict(providers)
        self._transport_factory = transport_factory
        self._connector_class = connector_class
        # Made on a provider's first request to a path, for its session (a reload's new session gets new ones).
        self._targets: dict[tuple[str, str], PostTarget] = {}
        self._sessions: dict[str, aiohttp.ClientSession] = {}
        self._test_clients: dict[str, httpx.AsyncClient] | None = None
        if transport_factory is not None:
            self._test_clients = {name: _test_client(p, transport_factory(p)) for name, p in providers.items()}

    def successor(self, providers: Mapping[str, Provider]) -> tuple[Upstreams, Upstreams]:
        """After a reload: the pools for `providers` (this one's, for providers whose settings did not
        change; new ones for the rest), and the pools left over, to close once their streams are done."""
        same = {n for n, p in providers.items() if self._providers.get(n) == p}
        following = Upstreams({n: p for n, p in providers.items() if n not in same}, self._transport_factory,
                              self._connector_class)
        following._providers = dict(providers)
        following._targets.update((key, t) for key, t in self._targets.items() if key[0] in same)
        following._sessions.update((n, s) for n, s in self._sessions.items() if n in same)
        if following._test_clients is not None and self._test_clients is not None:
            following._test_clients.update((n, self._test_clients[n]) for n in same)
        retired = Upstreams({})
        retired._sessions = {n: s for n, s in self._sessions.items() if n not in same}
        retired._test_clients = {n: c for n, c in (self._test_clients or {}).items() if n not in same}
        return following, retired

    async def open(self, endpoint: Endpoint, body: bytes, path: str = "/chat/completions",
                   headers: Mapping[str, str] | None = None) -> UpstreamResponse:
        """Send the request (to `path` under the provider's base URL, with `headers` besides the
        provider's); return as soon as the status line and headers have arrived."""
        name = endpoint.provider.name
        if self._test_clients is not None:
            client = self._test_clients[name]
            return await client.send(client.build_request("POST", path, content=body, headers=headers), stream=True)
        session = self._sessions.get(name)
        if session is None:
            session = self._sessions[name] = _session(self._providers[name], self._connector_class)
        target = self._targets.get((name, path))
        if target is None:
            url = URL(self._providers[name].base_url.rstrip("/") + path)
            target = self._targets[(name, path)] = PostTarget(session, url)
        if headers or self._connector_class is not StreamConnector:  # per-request headers; aiohttp's stock classes
            response = await session.post(target.url, data=body, headers=headers, allow_redirects=False)
        else:
            response = await post(session, target, body)
        return _AiohttpResponse(response)

    async def aclose(self) -> None:
        for session in self._sessions.values():
            await session.close()
        for client in (self._test_clients or {}).values():
            await client.aclose()
