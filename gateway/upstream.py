"""The one place that talks HTTP to providers: one pooled `httpx.AsyncClient` per provider.

`Upstreams.open()` sends a chat completion and returns the response with its body unread, so the
caller can stream it. The provider's key is attached here and nowhere else; `redact()` takes it out
of whatever a provider sends back in an error. Timeouts beyond connect and write are the
dispatcher's business (first-token budget, stall, deadline), not this module's.
Tests replace the network by passing an `httpx.AsyncBaseTransport` (e.g. `httpx.MockTransport`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from gateway.config import Endpoint, Provider

TransportFactory = Callable[[Provider], httpx.AsyncBaseTransport]

REDACTED = "[redacted]"
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


# httpcore's pool scans all its connections for every request waiting on it, so one pool of
# hundreds of connections costs O(n^2) CPU under load; many small pools, used in turn, do not.
CONNECTIONS_PER_POOL = 32


def _client_for(provider: Provider, transport: httpx.AsyncBaseTransport | None, shards: int) -> httpx.AsyncClient:
    headers = {"content-type": "application/json", "accept": "text/event-stream", **provider.headers}
    if provider.api_key is not None:
        headers["authorization"] = f"Bearer {provider.api_key.get_secret_value()}"
    limits = httpx.Limits(
        max_connections=max(1, provider.max_connections // shards),
        max_keepalive_connections=max(1, provider.max_keepalive_connections // shards),
        keepalive_expiry=30.0,
    )
    # read=None: how long a provider may think is decided per attempt by the dispatcher's budgets.
    timeout = httpx.Timeout(connect=provider.connect_timeout_s, read=None, write=30.0,
                            pool=provider.connect_timeout_s)
    return httpx.AsyncClient(
        base_url=provider.base_url,
        headers=headers,
        limits=limits,
        timeout=timeout,
        transport=transport,
        follow_redirects=False,  # only catalogue URLs are ever called
        trust_env=False,  # no proxy or netrc from the environment
    )


class Upstreams:
    """Pooled clients per provider (a few small pools, used in turn), created at start and closed at
    shutdown."""

    def __init__(
        self, providers: Mapping[str, Provider], transport_factory: TransportFactory | None = None
    ) -> None:
        self._clients: dict[str, list[httpx.AsyncClient]] = {}
        for name, p in providers.items():
            shards = max(1, -(-p.max_connections // CONNECTIONS_PER_POOL))
            transport = transport_factory(p) if transport_factory else None
            self._clients[name] = [_client_for(p, transport, shards) for _ in range(shards)]
        self._turn = itertools.count()

    async def open(self, endpoint: Endpoint, body: bytes) -> httpx.Response:
        """Send the request; return as soon as the status line and headers have arrived."""
        clients = self._clients[endpoint.provider.name]
        client = clients[next(self._turn) % len(clients)]
        request = client.build_request("POST", "/chat/completions", content=body)
        return await client.send(request, stream=True)

    async def aclose(self) -> None:
        for clients in self._clients.values():
            for client in clients:
                await client.aclose()
