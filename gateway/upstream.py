"""The one place that talks HTTP to providers: one pooled `httpx.AsyncClient` per provider.

`Upstreams.open()` sends a chat completion and returns the response with its body unread, so the
caller can stream it. The provider's key is attached here and nowhere else. Timeouts beyond connect
and write are the dispatcher's business (first-token budget, stall, deadline), not this module's.
Tests replace the network by passing an `httpx.AsyncBaseTransport` (e.g. `httpx.MockTransport`).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping

import httpx

from gateway.config import Endpoint, Provider

TransportFactory = Callable[[Provider], httpx.AsyncBaseTransport]


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
