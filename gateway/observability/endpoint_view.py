"""The public JSON views of an endpoint: catalogue facts plus live stats (`GET /v1/endpoints`), and
its time series at the telemetry's bucket resolution (`GET /v1/endpoints/history`).

Used by the endpoints routes, the dashboard and the stats command. They never include anything
secret: provider keys and extra headers stay out.
"""

from __future__ import annotations

from typing import Any

from gateway.config import Endpoint
from gateway.telemetry.bucket import ENDPOINT_FAULTS, Bucket
from gateway.telemetry.sketch import Sketch
from gateway.telemetry.stats import EndpointStats


def endpoint_json(endpoint: Endpoint, stats: EndpointStats,
                  rate_limits: dict[str, Any] | None = None) -> dict[str, Any]:
    """`rate_limits`: what the request shaper paces its provider by (shaper.py `view`): from the
    catalogue or learned from the provider's headers, and what the provider last said is left."""
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
        "rate_limits": rate_limits,
        "stats": stats.to_json(),
    }


def _median(sketch: Sketch) -> float | None:
    value = sketch.quantile(0.5)
    return None if value is None else round(value, 2)


def history_point(start: float, bucket: Bucket) -> dict[str, Any]:
    """One bucket: when it starts (unix seconds), what was asked and answered, and its medians."""
    return {
        "t": start,
        "requests": bucket.requests,
        "errors": sum(bucket.count(o) for o in ENDPOINT_FAULTS),
        "ttft_ms": _median(bucket.ttft_ms),
        "decode_tps": _median(bucket.decode_tps),
        "e2e_ms": _median(bucket.e2e_ms),
        "output_tokens": bucket.tok_out,
    }


def history_json(endpoint: Endpoint, series: list[tuple[float, Bucket]]) -> dict[str, Any]:
    return {"key": endpoint.key, "id": endpoint.id, "model": endpoint.model, "provider": endpoint.provider.name,
            "tier": endpoint.tier.value, "points": [history_point(t, b) for t, b in series]}
