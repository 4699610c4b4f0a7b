"""Stage 6, record: turn one attempt's meter into an `AttemptSample`, with its cost, and store it.

Called once per upstream attempt, finished or failed, and always paired with the `begin()` the
dispatcher made, so in-flight counts stay right. Storing is in memory: the telemetry store flushes
to Redis in the background, never on this path.
"""

from __future__ import annotations

import logging
import time

from gateway.capacity import Capacity
from gateway.config import Endpoint
from gateway.health.board import HealthBoard
from gateway.observability.metrics import Metrics
from gateway.routing.router import Router
from gateway.serve.lag import LoopLag
from gateway.telemetry.sample import AttemptSample, Outcome, stalled
from gateway.telemetry.store import TelemetryStore
from gateway.upstreams.stream import PROGRESS_MIN_CHUNKS, Meter

log = logging.getLogger("ultraroute")


def _int(value: object) -> int:
    return value if isinstance(value, int) else 0


def attempt_cost(endpoint: Endpoint, input_tokens: int, cached: int, output: int, e2e_s: float,
                 concurrent: int, served_tier: str | None = None, written: tuple[int, int] = (0, 0)) -> float:
    """USD for one attempt. Hourly-priced capacity is shared by everything running on it at once.
    Charged at the price of the tier that served (`served_tier`, as the provider reported it) when
    the catalogue lists the same provider and model at that tier, at the rates of its context size
    (`price.long_context`). `written`: prompt-cache writes (5-minute, 1-hour) among the input tokens,
    at `cache_write` / `cache_write_1h`."""
    if endpoint.price is not None:
        price = endpoint.price
        if served_tier is not None and endpoint.tier_prices:
            price = endpoint.tier_prices.get(served_tier, price)
        cost = price.cost(input_tokens, cached, output)
        if written[0] or written[1]:
            cost += price.cache_write_cost(input_tokens, *written)
        return cost
    if endpoint.hourly_cost is not None:
        return endpoint.hourly_cost / 3600.0 * e2e_s / max(1, concurrent)
    return 0.0


NO_WRITES = (0, 0)
# An attempt shorter than this (a refusal answered at once) has no mean load to speak of: the counts at
# its start and end are as good, and a division by a few µs of clock is not.
MIN_MEAN_S = 0.001


def _cache_writes(usage: dict[str, object]) -> tuple[int, int]:
    """Prompt-cache writes (5-minute, 1-hour) of an Anthropic answer, as upstreams/anthropic.py keeps them."""
    total = _int(usage.get("cache_creation_input_tokens"))
    hour = _int(usage.get("cache_creation_1h_input_tokens"))
    return total - hour, hour


class Recorder:
    """Stage 6 as an object: where every attempt's sample goes (telemetry, the router's load
    models and session affinity, the health board, the Prometheus metrics). `begin()` and `record()`
    always come in pairs."""

    def __init__(self, telemetry: TelemetryStore, router: Router, health: HealthBoard,
                 metrics: Metrics | None = None, capacity: Capacity | None = None,
                 lag: LoopLag | None = None) -> None:
        self.telemetry = telemetry
        self.lag = lag  # the event loop's lag: a decode rate measured through a stall is judged apart
        self.router = router
        self.health = health
        self.metrics = metrics
        self.capacity = capacity or Capacity()  # the dispatcher acquires, every record() releases
        self._no_usage: set[str] = set()  # endpoints already reported for sending no usage
        # Tokens per content chunk, per endpoint, from finished attempts' usage: a running stream counts
        # chunks; one that sends several tokens a chunk must not look that many times slower.
        self._tokens_per_chunk: dict[str, float] = {}

    def tokens_per_chunk(self, endpoint: Endpoint) -> float:
        """Tokens per content chunk in the endpoint's last answer with usage (1 before one): what a
        stream without usage (one that broke, say) is estimated at."""
        return self._tokens_per_chunk.get(endpoint.key, 1.0)

    def lag_now(self) -> float:
        """The loop's lag so far (`LoopLag.total`): kept in an attempt's meter when it is sent."""
        return 0.0 if self.lag is None else self.lag.total()

    def begin(self, endpoint: Endpoint) -> int:
        """An attempt starts; returns how many were already in flight at that endpoint."""
        return self.telemetry.begin(endpoint.key)

    def record(
        self,
        endpoint: Endpoint,
        meter: Meter,
        outcome: Outcome,
        status: int | None,
        started_at: float,
        in_flight_at_start: int,
        session_key: str | None = None,
    ) -> AttemptSample:
        at_end = max(0, self.telemetry.in_flight(endpoint.key) - 1)  # others, before this one ends
        mean = self._mean_load(endpoint, meter)
        # Read before the router remembers this turn: whether the session's last turn was served here.
        stayed = session_key is not None and self.router.sessions.get(session_key) == endpoint.key
        sample = make_sample(endpoint, meter, outcome, status, started_at, in_flight_at_start, at_end, stayed, mean,
                             self.lag_now() - meter.lag_at_sent)
        if meter.usage_estimated and endpoint.stream_usage and endpoint.key not in self._no_usage:
            self._no_usage.add(endpoint.key)  # once: the operator may mark it in the catalogue
            log.warning("endpoint %s sent no usage; the gateway estimates it (say `stream_usage: false` "
                        "in the catalogue if it never does)", endpoint.key)
        if outcome is Outcome.OK and meter.token_chunks >= 2 and not meter.usage_estimated:
            self._tokens_per_chunk[endpoint.key] = sample.output_tokens / meter.token_chunks
        self.telemetry.record(sample)
        self.telemetry.end(endpoint.key)
        self.capacity.release(endpoint)
        self.router.observe(sample, session_key)
        self.health.observe(endpoint, sample)
        if self.metrics is not None:
            self.metrics.attempt(endpoint, sample)
        return sample

    def busy_s(self, endpoint: Endpoint) -> float:
        """The endpoint's in-flight integral now (store.busy_s), kept in an attempt's meter when sent."""
        return self.telemetry.busy_s(endpoint.key)

    def _mean_load(self, endpoint: Endpoint, meter: Meter) -> float | None:
        """Others in flight on average since the attempt was sent (itself, counted throughout, apart);
        None for an attempt not counted in flight (a probe) or too short to say."""
        if meter.busy_at_sent is None:
            return None
        elapsed = time.perf_counter() - meter.t_sent
        if elapsed < MIN_MEAN_S:
            return None
        return max(0.0, (self.telemetry.busy_s(endpoint.key) - meter.busy_at_sent) / elapsed - 1.0)

    def progress(self, endpoint: Endpoint, meter: Meter, started_at: float, in_flight_at_start: int) -> None:
        """A stream still running: its decode rate so far, for the router to see a change now
        (speed.py). Not telemetry: the attempt's one sample is recorded when it ends."""
        chunks_per_s = meter.chunks_per_s()
        if chunks_per_s is None or meter.token_chunks < PROGRESS_MIN_CHUNKS:
            return
        since_first = meter.lag_at_sent if meter.lag_at_first is None else meter.lag_at_first
        if stalled(self.lag_now() - since_first, meter.t_last - meter.t_first):  # (both set: a rate)
            return  # read late, then all at once: the rate so far is the gateway's stall, not news
        rate = chunks_per_s * self._tokens_per_chunk.get(endpoint.key, 1.0)
        load = self._mean_load(endpoint, meter)
        if load is None:
            load = (in_flight_at_start + max(0, self.telemetry.in_flight(endpoint.key) - 1)) / 2.0
        self.router.progress(endpoint.key, load, rate, started_at)


def make_sample(
    endpoint: Endpoint,
    meter: Meter,
    outcome: Outcome,
    status: int | None,
    started_at: float,
    in_flight_at_start: int,
    in_flight_at_end: int | None = None,
    stayed: bool = False,
    in_flight_mean: float | None = None,
    loop_lag_s: float = 0.0,
) -> AttemptSample:
    """The sample of an attempt `meter` timed (`loop_lag_s`: the loop's lag while it ran)."""
    end = meter.t_end if meter.t_end is not None else time.perf_counter()
    usage = meter.usage or {}
    input_tokens = _int(usage.get("prompt_tokens"))
    cached = _int((usage.get("prompt_tokens_details") or {}).get("cached_tokens"))
    reasoning = _int((usage.get("completion_tokens_details") or {}).get("reasoning_tokens"))
    output = meter.output_tokens if outcome is Outcome.OK or meter.t_first is not None else 0
    e2e = end - meter.t_sent
    written = _cache_writes(usage) if "cache_creation_input_tokens" in usage else NO_WRITES
    sample = AttemptSample(
        endpoint_key=endpoint.key,
        started_at=started_at,
        outcome=outcome,
        status=status,
        ttft_s=None if meter.t_first is None else meter.t_first - meter.t_sent,
        ttfat_s=None if meter.t_first_answer is None else meter.t_first_answer - meter.t_sent,
        decode_tps=meter.decode_tps,
        e2e_s=e2e,
        input_tokens=input_tokens,
        cached_input_tokens=cached,
        cache_write_input_tokens=written[0] + written[1],
        output_tokens=output,
        reasoning_tokens=reasoning,
        cost_usd=attempt_cost(endpoint, input_tokens, cached, output, e2e, in_flight_at_start + 1,
                              meter.served_tier, written),
        in_flight_at_start=in_flight_at_start,
        in_flight_at_end=in_flight_at_end,
        in_flight_mean=in_flight_mean,
        stayed=stayed,
        loop_lag_s=loop_lag_s,
        ttft_lag_s=0.0 if meter.lag_at_first is None else meter.lag_at_first - meter.lag_at_sent,
    )
    return sample
