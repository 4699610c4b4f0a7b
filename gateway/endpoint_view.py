"""The public JSON view of an endpoint: catalogue facts plus live stats (`GET /v1/endpoints`).

Used by the endpoints route, the dashboard and the stats command. It never includes anything
secret: provider keys and extra headers stay out.
"""

from __future__ import annotations

from typing import Any

from gateway.config import Endpoint
from gateway.telemetry.stats import EndpointStats


def endpoint_json(endpoint: Endpoint, stats: EndpointStats) -> dict[str, Any]:
    price: dict[str, Any] | None = None
    if endpoint.price is not None:
        price = endpoint.price.model_dump()
    return {
        "id": endpoint.id,
        "key": endpoint.key,
        "model": endpoint.model,
        "provider": endpoint.provider.name,
        "upstream_model": endpoint.upstream_model,
        "tier": endpoint.tier.value,
        "price": price,
        "hourly_cost": endpoint.hourly_cost,
        "region": endpoint.region,
        "quantization": endpoint.quantization,
        "data_collection": endpoint.provider.data_collection,
        "context_length": endpoint.context_length,
        "capabilities": sorted(endpoint.capabilities),
        "advertised": endpoint.advertised.model_dump(),
        "available": endpoint.available,
        "stats": stats.to_json(),
    }
