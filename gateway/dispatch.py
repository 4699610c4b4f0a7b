"""Stage 4, dispatch: walk the plan until one endpoint passes the first-chunk gate (an attempt: upstreams/attempt.py).

One visible loop over the ordered candidates (`Dispatcher.dispatch`): the requested model's
endpoints, then each fallback model's. For each: skip it if the health board blocks it (open
circuit, cool-down, SLO, misconfigured) and say why; otherwise attempt it -- send the request (always
streaming, with usage), check the status, wait for the first token within the endpoint's first-token
budget -- once, or twice where `retry.py` says a second try at the same endpoint is worth it. A
client error returns at once; a "this model cannot take it" error (context length: only larger
windows; an unsupported parameter) moves on, to this model's next endpoint or the next model;
anything else moves on to the next candidate. Before the loop leaves a model, an endpoint of it that
answered 429 "come back in a moment" is waited for and tried once more (retry.py decides). A
request whose translation cannot be honoured (`ChatRequest.untranslatable`) is tried only at
endpoints passed its body as sent (skipped: untranslatable). Every attempt, failed or not, is
recorded. When the plan runs out, `AllCandidatesFailed` carries every failure. `probe()` is the
one attempt made outside any request: the background health probe.

Nothing reaches the client before the gate opens, so failover is invisible to it. Relaying and
recording the served attempt are the relay's and the pipeline's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.config import Endpoint
from gateway.context import Attempt, ChatRequest, Plan
from gateway.errors import (
    AllCandidatesFailed,
    GatewayError,
    UpstreamError,
    UpstreamMisconfigured,
)
from gateway.health.board import HealthBoard
from gateway.record import Recorder, make_sample
from gateway.retry import (
    RetryBudget,
    come_back_after,
    exceeds_context,
    model_cannot_take,
    mostly_works,
    rate_limit_wait,
)
from gateway.retry import attempts as retry_attempts
from gateway.routing.router import STATS_WINDOW_S
from gateway.serve.lag import LoopLag
from gateway.shaper import Shaper, estimated_tokens
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.telemetry.store import TelemetryStore
from gateway.upstreams import passes_through
from gateway.upstreams.attempt import open_attempt, outcome_of, outgoing, prompt_estimate
from gateway.upstreams.client import Upstreams
from gateway.upstreams.limit_headers import Reported
from gateway.upstreams.stream import Meter, UpstreamStream

PROBE_BODY = {"messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
# A probe that measures a decode rate (health/warm_up.py) asks for a long answer and is cut at its max_tokens.
MEASURE_PROMPT = "Count from 1 to 200, one number per line."


@dataclass(frozen=True, slots=True)
class DispatchLimits:
    stall_timeout_s: float
    ttft_budget_multiplier: float = 3.0
    ttft_budget_min_s: float = 2.0
    ttft_budget_max_s: float = 10.0
    deadline_s: float = 600.0
    max_wait_s: float = 5.0  # retry.max_wait_s: the longest 429 retry-after waited for within a model


@dataclass(frozen=True, slots=True)
class Skip:
    """A candidate passed over without an attempt, and why (circuit_open, cooldown, slo, ...)."""

    endpoint_id: str
    tier: str
    reason: str


@dataclass(slots=True)
class Served:
    """The attempt that passed the gate; the pipeline relays it and then records it."""

    stream: UpstreamStream
    attempts: tuple[Attempt, ...]  # the failed attempts before it
    started_at: float  # wall clock
    in_flight_at_start: int
    skips: tuple[Skip, ...] = ()


def _too_small(endpoint: Endpoint, too_long: Endpoint | None) -> bool:
    """After `too_long` said the prompt exceeds its window: whether `endpoint`'s is no larger. An
    unknown window is taken for the same within a model and for possibly larger in another."""
    if too_long is None:
        return False
    if endpoint.context_length is None or too_long.context_length is None:
        return endpoint.context_length is None and endpoint.model == too_long.model
    return endpoint.context_length <= too_long.context_length


class CapacityFull(Exception):
    """The endpoint is at its `max_concurrency` and its queue is full, or its provider's rate limit
    has no room within the wait allowed (reason `rate_limit`): spill, do not wait."""

    def __init__(self, reason: str = "capacity") -> None:
        super().__init__(reason)
        self.reason = reason


class Dispatcher:
    def __init__(self, upstreams: Upstreams, recorder: Recorder, health: HealthBoard, telemetry: TelemetryStore,
                 limits: DispatchLimits, budget: RetryBudget, lag: LoopLag | None = None) -> None:
        self.capacity = recorder.capacity  # acquired here, released by the recorder
        self.upstreams = upstreams
        self.recorder = recorder
        self.health = health
        self.telemetry = telemetry
        self.limits = limits
        self.budget = budget
        self.lag = lag  # budgets exclude the loop's own lag (serve/lag.py)
        self.on_retry: Callable[[Endpoint, GatewayError], None] | None = None
        self.shaper: Shaper | None = None  # providers' rate limits (shaper.py); set by services
        self.shaper_wait_s = 0.25  # how long a request waits for its turn when it could spill

    def _mostly_works(self, endpoint_key: str) -> bool:
        """Whether a 503 from this endpoint is sporadic (retry.py), by its recent attempts."""
        return mostly_works(self.telemetry.stats(endpoint_key, STATS_WINDOW_S, fresh=True))

    def first_token_budget(self, endpoint: Endpoint) -> float:
        """Fixed per endpoint, or a multiple of its live p90 TTFT within [min, max]."""
        if endpoint.first_token_budget_s is not None:
            return endpoint.first_token_budget_s
        limits = self.limits
        ttft = self.telemetry.stats(endpoint.key, 300).ttft_ms
        if ttft is None or ttft.count < 5:
            return limits.ttft_budget_max_s
        return min(limits.ttft_budget_max_s, max(limits.ttft_budget_min_s,
                                                  limits.ttft_budget_multiplier * ttft.p90 / 1000))

    async def dispatch(self, request: ChatRequest, plan: Plan, hedge_after_ms: float | None = None) -> Served:
        """Try the plan's candidates in order; return the first that produces a token.

        With `hedge_after_ms`, the first attempt that has produced no token by then is joined by one
        at the next candidate; the first to produce a token serves and the other is cancelled.
        Before leaving a model for the next one in `models`, an endpoint of it that answered 429
        "come back in a moment" is waited for and tried once more (see retry.py)."""
        if request.untranslatable is not None and not any(
                (sent := plan.request_for(request, e)).untranslatable is None or passes_through(sent, e)
                for e in plan.endpoints):
            raise request.untranslatable  # only an endpoint passed the body as sent could serve it
        attempts: list[Attempt] = []
        failures: list[tuple[str, GatewayError]] = []
        skips: list[Skip] = []
        started = time.perf_counter()
        deadline = started + self.limits.deadline_s
        too_long: Endpoint | None = None  # after a context-length error: only larger windows
        hedged: set[str] = set()  # candidates already raced as a hedge
        queue = deque(plan.endpoints)
        own = plan.model_requests  # a fallback model's own request (Anthropic's `fallbacks` entries)
        back_soon: tuple[Endpoint, float, float] | None = None  # 429 said: wait this long (since when)
        came_back: set[str] = set()  # each endpoint comes back once per request
        while queue or back_soon:
            if back_soon is not None and (not queue or queue[0].model != back_soon[0].model):
                # Leaving a model (or the plan): first, once, its endpoint that said to come back soon.
                back, back_soon = back_soon, None
                if await self._come_back(*back, started, deadline, came_back):
                    queue.appendleft(back[0])
                continue
            endpoint = queue.popleft()
            if endpoint.key in hedged or _too_small(endpoint, too_long):
                continue
            sent = request if own is None else own.get(endpoint.model, request)
            if sent.untranslatable is not None and not passes_through(sent, endpoint):
                skips.append(Skip(endpoint.id, endpoint.tier.value, "untranslatable"))
                continue
            blocked = self.health.blocked(endpoint)
            if blocked is not None:
                skips.append(Skip(endpoint.id, endpoint.tier.value, blocked))
                if blocked == "cooldown" and endpoint.key not in came_back:
                    back_soon = (endpoint, self.health.cooldown_left(endpoint), time.perf_counter())
                continue
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                break
            hedge = queue[0] if hedge_after_ms is not None and not attempts and queue else None
            hedge_sent = request if hedge is None or own is None else own.get(hedge.model, request)
            if hedge is not None and hedge_sent.untranslatable is not None and not passes_through(hedge_sent, hedge):
                hedge = None  # it would be sent the translation the request cannot have
            try:
                if hedge is None:
                    stream, started_at, in_flight = await self._attempt_endpoint(
                        sent, endpoint, attempts=attempts,
                        budget_s=min(self.first_token_budget(endpoint), remaining), has_alternatives=bool(queue))
                else:
                    stream, started_at, in_flight = await self._hedge(
                        (sent, endpoint), (hedge_sent, hedge), hedge_after_ms / 1000,  # type: ignore[operator]
                        attempts, remaining, hedged)
            except CapacityFull as full:
                skips.append(Skip(endpoint.id, endpoint.tier.value, full.reason))
                continue
            except GatewayError as err:
                failures.append((endpoint.id, err))
                wait_s = rate_limit_wait(err)
                if wait_s is not None and endpoint.key not in came_back:
                    back_soon = (endpoint, wait_s, time.perf_counter())
                if exceeds_context(err):
                    too_long = endpoint
                elif outcome_of(err) is Outcome.CLIENT_ERROR and not model_cannot_take(err):
                    raise  # the request itself is wrong: another endpoint would say the same
                continue
            return Served(stream, tuple(attempts), started_at, in_flight, tuple(skips))
        if failures:
            raise AllCandidatesFailed(failures)
        reasons = ", ".join(f"{s.endpoint_id}: {s.reason}" for s in skips) or "deadline passed"
        raise UpstreamError(f"No endpoint of '{plan.model}' can take requests now ({reasons}).", status=503,
                            retry_after_s=1.0)

    async def _come_back(self, endpoint: Endpoint, wait_s: float, since: float, started: float, deadline: float,
                         came_back: set[str]) -> bool:
        """Wait until `wait_s` after `since` and say yes, if retry.py agrees that `endpoint` is worth
        trying once more before its model is left: within `max_wait_s`, the request's first-token
        budget and its deadline."""
        time_left = min(deadline, started + self.limits.ttft_budget_max_s) - since
        if not come_back_after(wait_s, endpoint.key, self.budget, self.limits.max_wait_s, time_left):
            return False
        came_back.add(endpoint.key)
        if self.on_retry is not None:
            self.on_retry(endpoint, UpstreamError("retry-after", status=429))
        # A little past the end: uvloop's timers may fire a millisecond early, and the cool-down
        # must be over when the endpoint is asked again.
        await asyncio.sleep(max(0.0, since + wait_s - time.perf_counter()) + 0.005)
        return True

    async def _hedge(self, first: tuple[ChatRequest, Endpoint], second: tuple[ChatRequest, Endpoint], after_s: float,
                     attempts: list[Attempt], remaining: float, hedged: set[str]) -> tuple[UpstreamStream, float, int]:
        """Race `first` against `second` (each the request an endpoint is sent, and the endpoint),
        started `after_s` later if `first` has no token by then (and then added to `hedged`, so the
        plan does not try it again)."""

        def start(request: ChatRequest, endpoint: Endpoint) -> asyncio.Task[tuple[UpstreamStream, float, int]]:
            budget = min(self.first_token_budget(endpoint), remaining)
            return asyncio.ensure_future(self._attempt_endpoint(  # the other racer is the alternative
                request, endpoint, attempts=attempts, budget_s=budget, has_alternatives=True))

        racing = [start(*first)]
        done, _ = await asyncio.wait(racing, timeout=after_s)
        if not done and self.health.blocked(second[1]) is None:
            racing.append(start(*second))
            hedged.add(second[1].key)
        try:
            while racing:
                done, _ = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    racing.remove(task)
                    if task.exception() is None:
                        return task.result()
                    if not racing:
                        raise task.exception()  # type: ignore[misc]
            raise AssertionError("unreachable")
        finally:
            for task in racing:  # the loser: cancelled, recorded as such, its upstream closed
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, GatewayError):
                    won = await task
                    await won[0].aclose()
                    self.recorder.record(won[0].endpoint, won[0].meter, Outcome.CANCELLED, 200, won[1], won[2])

    async def resume(self, request: ChatRequest, plan: Plan, broken: Endpoint, text: str,
                     max_tokens: int | None = None) -> Served:
        """Continue an answer that broke after `text` on the next candidate that accepts a trailing
        assistant message as a prefix, asked for `max_tokens` more at most (what is left of the
        request's: a host counts a continuation's limit in new tokens). One that does not accept a
        prefix is never sent it: its 400 would hide the real failure. Raises if none can."""
        candidates = tuple(c for c in plan.candidates if c.endpoint is not broken
                           and "assistant_prefix" in c.endpoint.capabilities)
        if not candidates:
            raise UpstreamError("the stream broke and no endpoint can continue it", status=502)
        request = plan.request_for(request, broken)  # what the broken stream was asked (its model's own)
        messages = [*request.body["messages"], {"role": "assistant", "content": text, "prefix": True}]
        body = {**request.body, "messages": messages}
        if max_tokens is not None:
            for name in ("max_tokens", "max_completion_tokens"):
                if body.get(name) is not None:
                    body[name] = max_tokens
        continued = request._replace(body=body)
        # Every candidate continues that answer: not a fallback model's own request, without the prefix.
        return await self.dispatch(continued, plan._replace(candidates=candidates, model_requests=None))

    async def _attempt_endpoint(self, request: ChatRequest, endpoint: Endpoint, *,
                                attempts: list[Attempt], budget_s: float,
                                has_alternatives: bool) -> tuple[UpstreamStream, float, int]:
        """One endpoint, once or twice (see retry.py). Records every attempt; raises the last failure."""
        body = outgoing(request, endpoint)
        on_retry = None if self.on_retry is None else (lambda err: self.on_retry(endpoint, err))  # type: ignore[misc]
        async for attempt in retry_attempts(endpoint.key, self.budget, on_retry, self._mostly_works):
            with attempt:
                if self.shaper is not None and self.shaper.limits(endpoint):
                    budget_s = await self._shape(request, endpoint, has_alternatives, budget_s)
                if not await self.capacity.acquire(endpoint, request.priority):
                    raise CapacityFull()
                in_flight = self.recorder.begin(endpoint)
                started_at = time.time()
                meter = Meter(t_sent=time.perf_counter(), prompt_estimate=prompt_estimate(request),
                              busy_at_sent=self.recorder.busy_s(endpoint),
                              tokens_per_chunk=self.recorder.tokens_per_chunk(endpoint),
                              lag_at_sent=self.recorder.lag_now())
                try:
                    stream = await open_attempt(self.upstreams, endpoint, body, meter, budget_s,
                                         self.limits.stall_timeout_s, self.lag, request.upstream, request.stream)
                except GatewayError as err:
                    self._failed(endpoint, meter, err, started_at, in_flight, attempts)
                    raise
                except BaseException:
                    # The client went away (cancellation) while we waited: still pair begin() with end().
                    self.recorder.record(endpoint, meter, Outcome.CANCELLED, None, started_at, in_flight)
                    raise
                if stream.reported is not None:  # the provider's rate-limit headers (limit_headers.py)
                    self._reported(endpoint, stream.reported)
                stream.watch(self.recorder.progress, started_at, in_flight)
                return stream, started_at, in_flight
        raise AssertionError("unreachable: Attempts raises the last failure")

    async def _shape(self, request: ChatRequest, endpoint: Endpoint, has_alternatives: bool, budget_s: float) -> float:
        """Wait for the provider's rate limit to admit the request (shaper.py); the first-token
        budget left, or CapacityFull to spill. Only the last candidate waits the whole budget."""
        assert self.shaper is not None
        started = time.perf_counter()
        wait_s = min(budget_s, self.shaper_wait_s) if has_alternatives else budget_s
        tokens = estimated_tokens(request.prompt_chars, request.body.get("max_tokens")
                                  or request.body.get("max_completion_tokens"))
        if not await self.shaper.acquire(endpoint, tokens, request.priority, wait_s):
            raise CapacityFull("rate_limit")
        return max(0.1, budget_s - (time.perf_counter() - started))

    def _reported(self, endpoint: Endpoint, reported: Reported) -> None:
        """An answer said what is left of its provider's limits: the shaper learns it; a limit used
        up cools the endpoint down until its reset (served, but the next must wait)."""
        if self.shaper is not None:
            self.shaper.learn(endpoint.provider, reported)
        wait_s = reported.exhausted_s()
        if wait_s is not None:
            self.health.cool_down(endpoint, wait_s)

    def _failed(self, endpoint: Endpoint, meter: Meter, err: GatewayError, started_at: float, in_flight: int,
                attempts: list[Attempt]) -> None:
        reported = getattr(err, "reported", None)  # an UpstreamError's rate-limit headers
        if reported is not None and self.shaper is not None:
            self.shaper.learn(endpoint.provider, reported)
        outcome, speed = outcome_of(err), self.recorder.router.speed_model(endpoint.key)
        probe = err.status == 429 and speed is not None and speed.probing(in_flight)  # no news: no cool-down
        self.recorder.record(endpoint, meter, outcome, err.status, started_at, in_flight)
        attempts.append(Attempt(endpoint.key, endpoint.id, endpoint.tier.value, outcome, err.status,
                                err.metric_label, time.perf_counter() - meter.t_sent))
        if isinstance(err, UpstreamMisconfigured):
            self.health.misconfigured(endpoint, err.upstream_status)
        elif err.status == 429 and not probe:
            self.health.cool_down(endpoint, err.retry_after_s if err.retry_after_s is not None else 1.0)

    async def probe(self, endpoint: Endpoint, max_tokens: int = 1) -> AttemptSample:
        """A 1-token completion outside any client request (`health/probe.py`), or one of `max_tokens`
        that measures a decode rate (`health/warm_up.py`): within the endpoint's first-token budget, recorded
        in telemetry and costed, but not as a client attempt (no in-flight count, no capacity slot, no
        breaker observation: the caller reports the result). It waits its turn at the provider's rate
        limit (shaper.py), last in line; one the limit does not admit is not sent (`rate_limited`)."""
        if max_tokens == 1:
            body: dict[str, Any] = PROBE_BODY
        else:
            body = {"messages": [{"role": "user", "content": MEASURE_PROMPT}], "max_tokens": max_tokens}
        prompt = body["messages"][0]["content"]
        request = ChatRequest(request_id="probe", body=body, model=endpoint.model, stream=True,
                              include_usage=False, prompt_chars=len(prompt))
        started_at = time.time()
        in_flight = self.telemetry.in_flight(endpoint.key)
        if self.shaper is not None and self.shaper.limits(endpoint):
            # A probe spends the provider's rate limit as a request does: unshaped, it took a request
            # the shaper had promised a client's, and that one met a 429. Last in line; not sent if
            # the limit does not admit it within the first-token budget (a rate-limited probe).
            tokens = estimated_tokens(request.prompt_chars, max_tokens)
            if not await self.shaper.acquire(endpoint, tokens, "low", self.first_token_budget(endpoint)):
                meter = Meter(t_sent=time.perf_counter(), prompt_estimate=prompt_estimate(request))
                return make_sample(endpoint, meter, Outcome.RATE_LIMITED, None, started_at, in_flight)
        meter = Meter(t_sent=time.perf_counter(), prompt_estimate=prompt_estimate(request))
        try:
            stream = await open_attempt(self.upstreams, endpoint, outgoing(request, endpoint), meter,
                                 self.first_token_budget(endpoint), self.limits.stall_timeout_s)
            try:
                async for _ in stream.batches():
                    pass
            finally:
                await stream.aclose()
            outcome, status = Outcome.OK, 200
        except GatewayError as err:
            outcome, status = outcome_of(err), err.status
        sample = make_sample(endpoint, meter, outcome, status, started_at, in_flight)
        self.telemetry.record(sample)
        return sample
