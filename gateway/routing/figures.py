"""The numbers an endpoint is ranked by: predicted decode rate, TTFT and price for this request.

Measured figures win over advertised ones as soon as an endpoint has samples; the catalogue's
`advertised` figures are priors, used only until then. Decode rate is predicted *at the endpoint's
current load*: `LoadModel` learns, per endpoint, how per-user speed falls as requests share it
(1/tps is close to linear in the number in flight), with old samples forgotten quickly, so a
sudden slow-down shows within a few requests and a recovery as fast.

This module computes figures; it does not order or filter endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.config import Endpoint
from gateway.telemetry.stats import EndpointStats

# Per-user slowdown per extra concurrent request, relative, until the model has seen load vary.
# (A 235B MoE on four GPUs: 112 tok/s for one user, 71 at 64 -> ~0.9% per extra user.)
DEFAULT_RELATIVE_SLOWDOWN = 0.01
# Weight kept by old samples at each new one: ~7 samples of memory. Samples older than FORGET_S
# with nothing newer are dropped when a fresh one arrives: an endpoint that was passed over while
# slow is judged by how it is now, so a recovery shows from its first sample.
DECAY = 0.85
FORGET_S = 10.0
# Output tokens assumed when the request does not cap them, to price a request.
DEFAULT_OUTPUT_TOKENS = 512
MIN_SAMPLES = 3


class LoadModel:
    """Online, exponentially-forgetting least squares of 1/decode_tps against in-flight count."""

    __slots__ = ("_last", "_s", "_sx", "_sxx", "_sxy", "_sy")

    def __init__(self) -> None:
        self._s = self._sx = self._sy = self._sxx = self._sxy = 0.0
        self._last: float | None = None

    def observe(self, in_flight: int, decode_tps: float, now: float) -> None:
        if decode_tps <= 0:
            return
        y = 1.0 / decode_tps
        x = float(in_flight)
        d = DECAY
        if self._last is not None and now - self._last > FORGET_S:
            d = 0.0
        self._last = now
        self._s = self._s * d + 1.0
        self._sx = self._sx * d + x
        self._sy = self._sy * d + y
        self._sxx = self._sxx * d + x * x
        self._sxy = self._sxy * d + x * y

    @property
    def weight(self) -> float:
        return self._s

    def predict(self, in_flight: int) -> float | None:
        if self._s < 1e-9:
            return None
        mx, my = self._sx / self._s, self._sy / self._s
        var = self._sxx / self._s - mx * mx
        # Load must have varied by about a request for the slope to be measurable.
        slope = (self._sxy / self._s - mx * my) / var if var > 0.25 else DEFAULT_RELATIVE_SLOWDOWN * my
        slope = max(slope, 0.0)  # an endpoint never gets faster per user by sharing it
        y = my + slope * (in_flight - mx)
        return 1.0 / y if y > 0 else 1.0 / my


@dataclass(frozen=True, slots=True)
class Figures:
    decode_tps: float | None  # predicted per-user decode rate at the current load
    ttft_ms: float | None
    cost_usd: float | None  # estimated cost of this request; None if unknown
    in_flight: int
    samples: int
    source: str  # "measured" | "advertised" | "none"


def estimated_cost(endpoint: Endpoint, prompt_tokens: int, max_tokens: int | None,
                   stats: EndpointStats) -> float | None:
    output = max_tokens or DEFAULT_OUTPUT_TOKENS
    if endpoint.price is not None:
        return (prompt_tokens * endpoint.price.input + output * endpoint.price.output) / 1e6
    if endpoint.hourly_cost is not None and stats.requests and stats.window_s:
        # Rented capacity: what a token really costs is the hourly price over measured throughput.
        aggregate_tps = stats.tokens.output / stats.window_s
        if aggregate_tps > 0:
            return endpoint.hourly_cost / (aggregate_tps * 3600.0) * output
    return None


def figures_for(endpoint: Endpoint, stats: EndpointStats, load: LoadModel | None, in_flight: int,
                prompt_tokens: int, max_tokens: int | None) -> Figures:
    measured = stats.decode_tps is not None and stats.decode_tps.count >= MIN_SAMPLES
    tps: float | None = None
    if load is not None and load.weight >= 1.0:
        tps = load.predict(in_flight)
    elif measured and stats.decode_tps is not None:
        tps = stats.decode_tps.p50
    elif endpoint.advertised.tokens_per_second is not None:
        tps = endpoint.advertised.tokens_per_second / (1 + DEFAULT_RELATIVE_SLOWDOWN * in_flight)
    ttft = stats.ewma_ttft_ms
    if ttft is None and stats.ttft_ms is not None:
        ttft = stats.ttft_ms.p50
    if ttft is None:
        ttft = endpoint.advertised.ttft_ms
    has_samples = stats.requests > 0 or (load is not None and load.weight >= 1.0)
    has_prior = endpoint.advertised.tokens_per_second is not None or endpoint.advertised.ttft_ms is not None
    return Figures(
        decode_tps=tps,
        ttft_ms=ttft,
        cost_usd=estimated_cost(endpoint, prompt_tokens, max_tokens, stats),
        in_flight=in_flight,
        samples=stats.requests,
        source="measured" if has_samples else ("advertised" if has_prior else "none"),
    )
