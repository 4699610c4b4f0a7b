"""The agent race's endpoints: one model on hosts that differ in prefill speed, prompt cache and capacity.

Each host has a *true* simulator profile (read only by the oracle) and a catalogue entry whose
advertised figures are a vendor's claims, deliberately not the truth. Prices are true (a bill is not a
claim). Every figure is scaled by a seeded factor within +-15%, so no result is tuned to one curve.

- `gpu-a`, `gpu-b`: GPU hosts with prompt caches: prefill a few thousand tokens/s, cached tokens ~20x
  faster and 10x cheaper, decode ~100 tok/s that slows with load and context.
- `wafer`: a wafer-scale-like host: prefills ~25k tokens/s and decodes ~1,000 tok/s, but keeps no prompt
  cache (every turn is prefilled and billed cold), at a higher price.
- `ultra`: a capacity-limited ultrafast tier: fast prefill with a cache, ~600 tok/s decode that falls
  steeply with concurrency, 4 requests at a time (429 beyond), at a premium price.

All are listed as `standard` tier: the race is about routing within what the client may use, not about
which tiers a `speed` admits (the routing race covers that).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

TICK_MS = 40.0  # batched socket writes: keeps the race's CPU modest on a shared machine


@dataclass(frozen=True)
class Host:
    name: str
    profile: dict[str, Any]  # simulator profile: the truth
    price: dict[str, float]  # USD per 1M tokens (true)
    advertised: dict[str, float]  # what the catalogue claims

    @property
    def cache(self) -> bool:
        return bool(self.profile.get("prompt_cache", {}).get("enabled", True))


def hosts(seed: int) -> tuple[Host, ...]:
    rng = random.Random(seed)

    def j(x: float) -> float:
        return round(x * rng.uniform(0.85, 1.15), 4)

    def profile(ttft_ms: float, prefill: float, cached: float, tps: float, slowdown: float,
                capacity: int = 256, cache: bool = True) -> dict[str, Any]:
        return {"ttft_ms": round(j(ttft_ms)), "ttft_jitter": 0.1, "prefill_tokens_per_second": round(j(prefill)),
                "cached_prefill_tokens_per_second": round(j(cached)), "tokens_per_second": j(tps),
                "slowdown_per_user": j(slowdown), "decode_slowdown_per_1k_context": 0.004,
                "capacity": capacity, "tick_ms": TICK_MS,
                "prompt_cache": {"enabled": cache, "ttl_s": 300}}

    return (
        Host("gpu-a", profile(350, 5000, 100_000, 110, 0.03),
             {"input": 1.0, "cached_input": 0.1, "output": 4.0},
             {"tokens_per_second": 150, "ttft_ms": 300, "prefill_tokens_per_second": 8000}),
        Host("gpu-b", profile(450, 3500, 80_000, 90, 0.02),
             {"input": 0.8, "cached_input": 0.08, "output": 3.2},
             {"tokens_per_second": 140, "ttft_ms": 250, "prefill_tokens_per_second": 6000}),
        Host("wafer", profile(200, 25_000, 25_000, 1000, 0.04, capacity=64, cache=False),
             {"input": 1.6, "output": 6.0},
             {"tokens_per_second": 2000, "ttft_ms": 100, "prefill_tokens_per_second": 40_000}),
        Host("ultra", profile(150, 12_000, 300_000, 600, 0.25, capacity=4),
             {"input": 3.0, "cached_input": 0.3, "output": 12.0},
             {"tokens_per_second": 1500, "ttft_ms": 80, "prefill_tokens_per_second": 30_000}),
    )
