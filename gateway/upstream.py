"""The one place that talks HTTP to providers: one pooled `httpx.AsyncClient` per provider.

`Upstreams.open()` sends a chat completion and returns the response with its body unread, so the
caller can stream it. The provider's key is attached here and nowhere else. Timeouts beyond connect
and write are the dispatcher's business (first-token budget, stall, deadline), not this module's.
Tests replace the network by passing an `httpx.AsyncBaseTransport` (e.g. `httpx.MockTransport`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import httpx

from gateway.config import Endpoint, Provider

TransportFactory = Callable[[Provider], httpx.AsyncBaseTransport]


def _client_for(provider: Provider, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
    headers = {"content-type": "application/json", "accept": "text/event-stream", **provider.headers}
    if provider.api_key is not None:
        headers["authorization"] = f"Bearer {provider.api_key.get_secret_value()}"
    limits = httpx.Limits(
        max_connections=provider.max_connections,
        max_keepalive_connections=provider.max_keepalive_connections,
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
    """Pooled clients, one per provider, created at start and closed at shutdown."""

    def __init__(
        self, providers: Mapping[str, Provider], transport_factory: TransportFactory | None = None
    ) -> None:
        self._clients = {
            name: _client_for(p, transport_factory(p) if transport_factory else None)
            for name, p in providers.items()
        }

    async def open(self, endpoint: Endpoint, body: bytes) -> httpx.Response:
        """Send the request; return as soon as the status line and headers have arrived."""
        client = self._clients[endpoint.provider.name]
        request = client.build_request("POST", "/chat/completions", content=body)
        return await client.send(request, stream=True)

    def pool_stats(self) -> dict[str, int]:
        """Connections per provider currently checked out of their pools (idle ones not counted)."""
        out: dict[str, int] = {}
        for name, client in self._clients.items():
            pool = getattr(client._transport, "_pool", None)
            conns = getattr(pool, "connections", []) if pool is not None else []
            out[name] = sum(1 for c in conns if not c.is_idle())
        return out

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
