"""The read model routing policies consume: immutable per-endpoint statistics for one window.

What it does: defines `Percentiles`, `TokenTotals` and `EndpointStats` (frozen dataclasses) and their
JSON shape (`to_json()`, plain ints and rounded floats, ready for orjson).

What it does not do: no computation of the numbers (see `window.py`), no I/O, no caching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gateway.telemetry.fit import LoadFit
from gateway.telemetry.prefill import PrefillFit

QUANTILES: tuple[float, ...] = (0.25, 0.5, 0.75, 0.9, 0.95, 0.99)


def _r(x: float, nd: int = 1) -> float:
    return round(x, nd)


@dataclass(frozen=True, slots=True)
class Percentiles:
    """Quantiles of one metric over the window (from the sketch, ~1 % relative accuracy)."""

    p25: float
    p50: float
    p75: float
    p90: float
    p95: float
    p99: float
    count: int  # samples the quantiles are based on

    @classmethod
    def from_values(cls, values: list[float], count: int) -> Percentiles:
        """`values` are the quantiles in `QUANTILES` order."""
        return cls(*values, count=count)

    def to_json(self) -> dict[str, Any]:
        return {
            "p25": _r(self.p25), "p50": _r(self.p50), "p75": _r(self.p75), "p90": _r(self.p90),
            "p95": _r(self.p95), "p99": _r(self.p99), "count": self.count,
        }


@dataclass(frozen=True, slots=True)
class TokenTotals:
    input: int = 0  # every input token, cache reads and writes included (OpenAI's convention)
    cached_input: int = 0  # of which read from the provider's prompt cache
    output: int = 0
    reasoning: int = 0
    stayed_input: int = 0  # input of turns that stayed on the endpoint of their session's last turn
    stayed_cached: int = 0  # ... of which the endpoint reported cached
    cache_write_input: int = 0  # of the input, written to the prompt cache (priced at cache_write)

    @property
    def cache_hit_ratio(self) -> float | None:
        """Cached share of the input of sessions that stayed here; None before any stayed."""
        return self.stayed_cached / self.stayed_input if self.stayed_input > 0 else None

    def to_json(self) -> dict[str, int]:
        return {"input": self.input, "cached_input": self.cached_input,
                "cache_write_input": self.cache_write_input, "output": self.output, "reasoning": self.reasoning}


@dataclass(frozen=True, slots=True)
class EndpointStats:
    """Rolling statistics of one endpoint over the last `window_s` seconds.

    Counts: `requests` is every attempt (cancelled and client errors included). Rates are over
    `requests - cancelled - client_errors` (attempts the endpoint is accountable for); `error_rate`
    counts server errors, timeouts, connect errors and 429s, i.e. `errors`. Percentiles are None
    when the window holds no value for that metric. `ttft_ms`/`ttfat_ms`/`decode_tps` come from
    every attempt that measured them; `e2e_ms` only from successful attempts. `in_flight` is the
    count when the stats were computed (use `store.in_flight()` for the live value). `age_s` is the
    time since the newest sample of this endpoint (None if none is known). The EWMAs are local to
    this replica and react within a few samples. `fit_tps`/`fit_ttft` are the window's speed-vs-load
    sums (fit.py), `fit_prefill` its TTFT-vs-prompt-size sums (prefill.py); treat them as read-only.
    """

    window_s: float
    requests: int = 0
    ok: int = 0
    errors: int = 0
    error_rate: float = 0.0
    rate_limited_rate: float = 0.0
    timeout_rate: float = 0.0
    in_flight: int = 0
    age_s: float | None = None
    ttft_ms: Percentiles | None = None
    ttfat_ms: Percentiles | None = None
    decode_tps: Percentiles | None = None
    e2e_ms: Percentiles | None = None
    ewma_ttft_ms: float | None = None
    ewma_decode_tps: float | None = None
    tokens: TokenTotals = field(default_factory=TokenTotals)
    cost_usd: float = 0.0
    cancelled: int = 0
    client_errors: int = 0
    # Speed against load over the window, all replicas (fit.py): 1/decode rate and TTFT (s).
    fit_tps: LoadFit | None = None
    fit_ttft: LoadFit | None = None
    fit_prefill: PrefillFit | None = None  # TTFT against uncached input tokens and load (prefill.py)

    def to_json(self) -> dict[str, Any]:
        def pct(p: Percentiles | None) -> dict[str, Any] | None:
            return None if p is None else p.to_json()

        def opt(x: float | None, nd: int = 1) -> float | None:
            return None if x is None else _r(x, nd)

        ws = self.window_s
        return {
            "window_s": int(ws) if float(ws).is_integer() else ws,
            "requests": self.requests,
            "ok": self.ok,
            "errors": self.errors,
            "error_rate": round(self.error_rate, 4),
            "rate_limited_rate": round(self.rate_limited_rate, 4),
            "timeout_rate": round(self.timeout_rate, 4),
            "in_flight": self.in_flight,
            "age_s": opt(self.age_s, 2),
            "ttft_ms": pct(self.ttft_ms),
            "ttfat_ms": pct(self.ttfat_ms),
            "decode_tps": pct(self.decode_tps),
            "e2e_ms": pct(self.e2e_ms),
            "ewma": {"ttft_ms": opt(self.ewma_ttft_ms), "decode_tps": opt(self.ewma_decode_tps)},
            "tokens": self.tokens.to_json(),
            "cost_usd": round(self.cost_usd, 6),
            "prefill": self.prefill_json(),
        }

    def prefill_json(self) -> dict[str, Any]:
        """The TTFT curve and cache figures: prefill tokens/s, base latency, queueing, cache hit ratio."""
        line = None if self.fit_prefill is None else self.fit_prefill.line()
        ratio = self.tokens.cache_hit_ratio
        return {
            "prefill_tps": None if line is None or line.prefill_tps is None else round(line.prefill_tps),
            "base_ms": None if line is None else _r(line.base_s * 1000.0),
            "queue_ms_per_request": None if line is None else _r(line.queue_s * 1000.0),
            "cache_hit_ratio": None if ratio is None else round(ratio, 3),
        }
