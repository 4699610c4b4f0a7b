"""Telemetry: what every routing policy reads about upstream endpoints.

`record()` one `AttemptSample` per upstream attempt, bracket attempts with `begin()`/`end()`, read
`stats(endpoint_key, window_s)`. All of that is synchronous and in memory; a `RedisStore` shares the
data between replicas from a background task. `make_store()` picks the implementation.

This package does not decide anything about routing and does not export metrics itself.
"""

from __future__ import annotations

from gateway.telemetry.bucket import Bucket
from gateway.telemetry.redis_store import RedisStore
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.telemetry.sketch import Sketch
from gateway.telemetry.stats import EndpointStats, Percentiles, TokenTotals
from gateway.telemetry.store import MemoryStore, StoreBase, TelemetryStore
from gateway.telemetry.window import EndpointWindows

__all__ = [
    "AttemptSample",
    "Bucket",
    "EndpointStats",
    "EndpointWindows",
    "MemoryStore",
    "NullStore",
    "Outcome",
    "Percentiles",
    "RedisStore",
    "Sketch",
    "StoreBase",
    "TelemetryStore",
    "TokenTotals",
    "make_store",
]


class NullStore(MemoryStore):
    """Counts in-flight requests but records nothing: recording off, to measure what recording costs."""

    def record(self, sample: AttemptSample) -> None:
        return None


def make_store(redis_url: str | None, *, replica_id: str, key_prefix: str = "ur:tel",
               flush_interval_s: float = 0.5, record: bool = True) -> TelemetryStore:
    """A `RedisStore` when `redis_url` is set (non-empty), else a `MemoryStore`; a `NullStore` when
    `record` is off.

    Call `await store.start()` before use and `await store.stop()` at shutdown.
    """
    if not record:
        return NullStore()
    if redis_url:
        return RedisStore(redis_url, replica_id=replica_id, key_prefix=key_prefix,
                          flush_interval_s=flush_interval_s, refresh_interval_s=flush_interval_s)
    return MemoryStore()
