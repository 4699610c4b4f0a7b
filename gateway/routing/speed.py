"""Speed against load: what an endpoint will do for *this* request at the load it would then have.

Per endpoint, three sources, most specific first:

1. a local running fit (`SpeedModel`): 1/decode rate and TTFT against the load it ran under, least squares
   with exponential forgetting (~7 samples of memory, halved every 3 s; a sample after `FORGET_S` of
   silence starts afresh), so a slow-down shows within a few requests and a recovery from the first
   sample after a pause (the router explores a passed-over endpoint once it has gone stale);
2. the shared fit of the last minute (`EndpointStats.fit_tps`/`fit_ttft`, every replica's samples,
   merged through the telemetry store's flush/refresh): gives the slope when the local fit has
   not seen load vary, and the level on a replica that has not used the endpoint yet;
3. the catalogue's advertised figures: the prior, with a default slow-down of 1% per extra user.

`predict()` returns, for a request of `n` output tokens joining `load` requests in flight: its decode
rate and TTFT (with the prompt's uncached tokens at the endpoint's fitted prefill rate, once one is
measured: telemetry/prefill.py), its end-to-end time, and the time it adds to the requests already there (each of the
`load` others decodes its remaining ~n/2 tokens at the slower rate): the marginal cost that keeps
the router from piling onto the endpoint that looked fastest until it is no longer fast. The score
`sort: throughput` minimises is the decode time of this request plus that marginal cost, with the
endpoint's failures priced by what they cost: in the live choice the time a failure takes plus its
fallback's (`fallback_scores`), in the cached ranking, which does not know the fallback, a flat factor.

Change: a sample far slower than the local fit predicts at its load (`SURPRISE` times, the load's
and the slope's uncertainty allowed for) says the endpoint itself changed -- a tier slowed to a
third -- and the fit starts afresh from it, as after `FORGET_S` of silence. Evidence is as
old as when its request was sent: after such a restart, samples of requests sent before the one that
caused it are dropped (they describe the endpoint as it was). A running stream's decode rate so far
(`progress`, every few tenths of a second) is checked the same way, so a slow-down is seen from the
first requests sent after it, not seconds later when they end; only a surprise acts on it, the rest
waits for the request's own sample. The other way, a finished sample `SURPRISE` times faster than
the fit (a slow-down that ended, seen by a re-check) rescales the fit to it, keeping its slope
relative to its level: blended with the slow samples it would win its traffic back only over
several more, while an endpoint with failures as cheap as a flaky one's now takes that traffic.
Both judge a sample by the fit's line; a fit restarted from few samples at one load has no slope
of its own, and then borrows its shape (slope relative to level) from the fit before the restart.

Capacity: a 429 at `k` in flight teaches that the endpoint takes at most `k` (`learned_capacity`);
after `CAPACITY_PROBE_S` without another 429 the limit grows by one, so a capacity that rises is
found again. That growth is a probe: a 429 to a request sent beyond the limit a 429 last showed
(`probing`) confirms the limit, and the next probe waits twice as long (up to `CAPACITY_PROBE_MAX_S`).
Such a 429 needs no cool-down of the whole endpoint (dispatch.py): the learned limit already keeps
it at what it takes, while a cool-down would turn the best endpoint away for the retry-after (1 s of
all its traffic, every probe). Nothing here does I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from gateway.config import Endpoint
from gateway.telemetry.fit import LoadFit
from gateway.telemetry.prefill import PrefillFit, PrefillLine

# Per-user slowdown per extra concurrent request, relative, until the model has seen load vary.
# (A 235B MoE on four GPUs: 112 tok/s for one user, 71 at 64 -> ~0.9% per extra user.)
DEFAULT_RELATIVE_SLOWDOWN = 0.01
DECAY = 0.85  # weight kept by old samples at each new one: ~7 samples of memory ...
HALF_LIFE_S = 3.0  # ... and halved every 3 s: a sample after a pause (exploration) outweighs the old
FORGET_S = 10.0  # a sample after this much silence starts the local fit afresh
# A sample this many times slower than the local fit predicts at its load: the endpoint changed. A
# tier slowed to a third is well past it; noise of a busy machine over half a second of decode is not.
SURPRISE = 2.0
# A decode rate measured while the gateway's own event loop lagged this share of its decode span or
# more is not a surprise either way: a stalled loop reads a stream late and then all at once, so one
# stream at 600 tok/s read through a 300 ms stall measured 170, and one read just after it 1,700 --
# and a fast tier was passed over on that one sample (fault run). It still counts in the fit.
STALLED_SHARE = 0.25
CAPACITY_PROBE_S = 10.0  # without a 429 for this long, a learned capacity grows by one ...
CAPACITY_PROBE_MAX_S = 80.0  # ... after each probe a 429 answered, twice as long, up to this
# A failed attempt costs roughly another try elsewhere: expected time is scaled by 1 + this x error rate
# where the alternative is not known (the cached ranking). The live choice knows it (`fallback_scores`).
ERROR_PENALTY = 2.0
HANG_S = 2.0  # what a timeout costs before the fallback starts: the dispatcher's least first-token budget
# Optimism in the face of few samples: an endpoint with under CONFIDENT_WEIGHT recent local samples
# is scored this much better, so that one noisy sample (a first request's cold connection, an
# exploration during a stall) does not shut it out: it gets a few more requests and is then judged.
# A real slow-down (a third of the speed) is far outside it.
CONFIDENT_WEIGHT = 3.0
OPTIMISM = 1.0
# Trust but verify: an endpoint never measured (its speed is only the catalogue's claim) is sent at
# most this many requests at once, or its fair share of what is in flight, until its first sample.
# Otherwise a burst at start-up goes wholly to whichever endpoint advertises the most (a false claim
# of 500 tok/s took a whole first wave of 24 users), and that wave is the tail of the whole run.
TRIAL_CONCURRENCY = 2
# A claim the measurements contradict is dropped: the advertised rate anchors the curve at low load
# only while the measured rate is within what a steep slow-down (this much per extra user) from the
# claim would give. A tier that falls from 700 to 330 tok/s at 6 users keeps its claim; one that
# delivers 70 where it claims 500 does not.
PLAUSIBLE_SLOWDOWN = 0.5


class SpeedModel:
    """One endpoint's local fits (forgetting) and its learned capacity."""

    __slots__ = ("_cap_at", "_confirmed", "_last", "_probe_every", "_shape", "_since", "_slowed_at",
                 "learned_capacity", "tps", "ttft")

    @property
    def slowed_at(self) -> float:
        """When the request was sent that last showed a sudden slow-down (wall clock; -inf: never)."""
        return self._slowed_at

    def __init__(self) -> None:
        self.tps = LoadFit()  # y = 1 / decode rate (s per token)
        self.ttft = LoadFit()  # y = TTFT (s)
        self._last: float | None = None
        self._since = -math.inf  # when the request that last restarted or rescaled the fit on a surprise was sent
        self._slowed_at = -math.inf  # ... the last one that showed a slow-down
        # The speed fit's slope relative to its level (per extra user), from the last fit that measured
        # one: a restart (a slow-down, or silence) drops the samples but not the endpoint's shape, and
        # judging the few samples after it without a slope would allow any speed-up at lower load
        # (PLAUSIBLE_SLOWDOWN) -- a recovery seen at low load after a crowded slow-down went unseen.
        self._shape: float | None = None
        self.learned_capacity: int | None = None
        self._cap_at = 0.0
        self._confirmed: int | None = None  # the limit a 429 last showed (learned_capacity may have grown)
        self._probe_every = CAPACITY_PROBE_S

    def observe(self, in_flight: float, decode_tps: float | None, ttft_s: float | None, now: float,
                sent_at: float | None = None, lagged: bool = False) -> bool:
        """One finished attempt (`sent_at`: when its request was sent, wall clock; `lagged`: measured
        through a lag of the gateway's loop, so no surprise). True when it restarted the fit (silence
        or a slow surprise) or rescaled it (a fast one: `_recovered`): then rankings built on the old
        fit are stale."""
        if (decode_tps is None or decode_tps <= 0) and ttft_s is None:
            return False
        if sent_at is not None and sent_at < self._since:
            return False  # older evidence than what the fit was restarted from
        y_tps = None if not decode_tps or decode_tps <= 0 else 1.0 / decode_tps
        gap = math.inf if self._last is None else max(0.0, now - self._last)
        surprise = y_tps is not None and not lagged and self._slowed(in_flight, y_tps)
        fresh = gap > FORGET_S or surprise
        faster = None if fresh or lagged or y_tps is None else self._recovered(in_flight, y_tps)
        if faster is not None:  # the endpoint sped up (a slow-down ended): same shape, its new level
            self.tps.scale_y(faster)
        if (surprise or faster is not None) and sent_at is not None:
            self._since = sent_at
            if surprise:
                self._slowed_at = sent_at
        if fresh:
            self._keep_shape()
        keep = DECAY * 0.5 ** (gap / HALF_LIFE_S) if not fresh else 0.0
        self._last = now
        for fit, y in ((self.tps, y_tps), (self.ttft, ttft_s)):
            if y is None:
                continue
            fit.scale(keep)
            fit.add(in_flight, y)
        return fresh or faster is not None

    def progress(self, in_flight: float, decode_tps: float, now: float, sent_at: float) -> bool:
        """A running attempt's decode rate so far. Only a surprise acts on it: the speed fit restarts
        from it (True). Anything else waits for the attempt's own sample, which counts once."""
        if decode_tps <= 0 or sent_at < self._since:
            return False
        y = 1.0 / decode_tps
        if not self._slowed(in_flight, y):
            return False
        self._since = self._slowed_at = sent_at
        self._last = now
        self._keep_shape()
        self.tps.scale(0.0)
        self.tps.add(in_flight, y)
        return True

    def shape(self) -> float | None:
        """The speed fit's slope relative to its level: as measured now, else as last measured (the
        rankings ask, every few tenths of a second: `curve`)."""
        self._keep_shape()
        return self._shape

    def _keep_shape(self) -> None:
        """Remember the speed fit's relative slope, if it measures one (also before it restarts)."""
        slope = self.tps.confident_slope()
        line = _line(self.tps, None, slope) if slope is not None else None
        if line is not None and line[0] > 0:
            self._shape = line[1] / line[0]

    def _local_line(self) -> tuple[float, float, tuple[float, float] | None] | None:
        """What a finished sample is judged by: the speed fit's mean load and s-per-token, and its
        line when its slope is measured -- or, after a restart, the old fit's shape through the new
        level; None while the fit has too little weight to judge by."""
        fit = self.tps
        if fit.w < 0.5:
            return None
        mx, my = fit.sx / fit.w, fit.sy / fit.w
        slope = fit.confident_slope()
        if slope is not None:
            line = _line(fit, None, slope)
        elif self._shape is not None:
            line = _through(mx, my, self._shape)
        else:
            line = None
        return mx, my, line

    def _slowed(self, x: float, y: float) -> bool:
        """Whether s-per-token `y` at load `x` is `SURPRISE` times slower than the local fit predicts:
        with a measured slope, at one request more than `x` (a sample's load is a mean of two counts);
        without, allowing any slow-down with load up to PLAUSIBLE_SLOWDOWN per user (a sample at a
        higher load than the fit's is not a change of the endpoint). Only slower: a restart from a fast
        sample would drop the slope that keeps a burst off a steep endpoint (a faster one is
        `_recovered`, which rescales the fit instead)."""
        local = self._local_line()
        if local is None:
            return False
        mx, my, line = local
        if line is not None:
            expected = line[0] + line[1] * (x + 1.0)
        else:
            expected = my * (1.0 + PLAUSIBLE_SLOWDOWN * max(0.0, x - mx))
        return y > SURPRISE * expected

    def _recovered(self, x: float, y: float) -> float | None:
        """Whether a finished attempt's s-per-token `y` at load `x` is `SURPRISE` times faster than the
        local fit predicts -- at one request fewer than `x`, or without a measured slope allowing a
        speed-up at lower load up to PLAUSIBLE_SLOWDOWN per user -- and if so the factor that brings
        the fit to it. The fit is rescaled, not restarted: its slope, relative to its level, is what
        keeps a burst off a steep endpoint, and a slow-down that ends does not change it. A running
        stream's rate is not used: one sample of a whole request, then at once."""
        local = self._local_line()
        if local is None:
            return None
        mx, my, line = local
        if line is not None:
            at, bound = line[0] + line[1] * x, line[0] + line[1] * max(0.0, x - 1.0)
        else:  # the bound is also the level it is scaled to: short of the sample, the safe side
            at = bound = my / (1.0 + PLAUSIBLE_SLOWDOWN * max(0.0, mx - x))
        return y / at if y * SURPRISE < bound else None

    def rate_limited(self, in_flight: int, now: float) -> None:
        """A 429 with `in_flight` others in flight (all replicas): it takes at most that many."""
        cap = max(1, in_flight)
        if not self.probing(in_flight):  # a limit that is news: probe it again soon
            self._probe_every = CAPACITY_PROBE_S
        elif self.learned_capacity is not None and self.learned_capacity > cap:  # a probe's first 429
            self._probe_every = min(2.0 * self._probe_every, CAPACITY_PROBE_MAX_S)
        if self.learned_capacity is None or cap < self.learned_capacity:
            self.learned_capacity = cap
        self._confirmed = self.learned_capacity
        self._cap_at = now

    def probing(self, in_flight: int) -> bool:
        """Whether a request sent with `in_flight` others there went beyond the limit a 429 last
        showed (the learned capacity had grown since: a probe, or a request sent beside it): its 429
        is no news (module doc)."""
        return self._confirmed is not None and in_flight >= self._confirmed

    def capacity(self, now: float) -> int | None:
        cap = self.learned_capacity
        if cap is not None and now - self._cap_at > self._probe_every:
            cap = self.learned_capacity = cap + 1
            self._cap_at = now
        return cap


def stalled(loop_lag_s: float, span_s: float) -> bool:
    """Whether a decode rate measured over `span_s` with `loop_lag_s` of the gateway's own loop lag
    meanwhile is the stall's more than the endpoint's (STALLED_SHARE)."""
    return loop_lag_s > 0.0 and loop_lag_s >= STALLED_SHARE * span_s


class Prediction(NamedTuple):
    """(A tuple: several are made per request, and a NamedTuple is built in C.)"""

    decode_tps: float | None
    ttft_s: float | None
    load: int  # in flight with this request added: what it was judged at
    e2e_s: float  # predicted end-to-end for n tokens (inf when unknown or full)
    marginal_s: float  # time this request adds to the requests already in flight
    score_s: float  # what the ranking minimises: (decode time + marginal) x the error penalty (and optimism)
    clean_s: float = math.inf  # score_s as if it never failed: `fallback_scores` prices the failures


def concurrency_limit(endpoint: Endpoint, learned: int | None) -> int | None:
    """The catalogue's `max_concurrency` or the capacity learned from 429s, whichever is lower."""
    limits = [x for x in (endpoint.max_concurrency, learned) if x is not None]
    return min(limits) if limits else None


def _through(mx: float, my: float, shape: float) -> tuple[float, float]:
    """The line (y at x=0, slope) through the level (mx, my) whose slope is `shape` x its value at 0."""
    at_zero = my / (1.0 + shape * mx)
    return at_zero, at_zero * shape


def _line(local: LoadFit | None, shared: LoadFit | None, default_slope: float | None,
          prior: float | None = None, shape: float | None = None) -> tuple[float, float] | None:
    """(y at x=0, slope) from the local fit's level, else the shared one's; the slope from whichever
    measured one confidently (local first: fit.py `confident_slope`); else the endpoint's `shape` as
    last measured (slope relative to level: samples made noisy -- a busy machine -- or all at about
    one load hide a slope without changing it, and an endpoint that lost its slope took every request
    of a burst); else `default_slope` (None: relative 1% of the level, or, if steeper, the line from
    `prior` -- the advertised figure, taken as the endpoint alone -- to the level measured at load,
    unless the measurement contradicts the claim (PLAUSIBLE_SLOWDOWN): an endpoint seen only when
    crowded is not judged slow at any load, it gets requests at low load and is measured there)."""
    level = None
    for fit in (local, shared):
        if fit is not None and fit.w >= 0.5:
            level = fit.mean()
            break
    if level is None:
        return None
    mx, my = level
    slope = None
    for fit in (local, shared):
        if fit is not None and (slope := fit.confident_slope()) is not None:
            break
    if slope is None and shape is not None:
        slope = _through(mx, my, shape)[1]
    if slope is None:
        slope = DEFAULT_RELATIVE_SLOWDOWN * my if default_slope is None else default_slope
        if prior is not None and mx >= 1.0 and my <= prior * (1.0 + PLAUSIBLE_SLOWDOWN * mx):
            slope = max(slope, (my - prior) / mx)
    slope = max(slope, 0.0)  # an endpoint never gets faster per user by sharing it
    if mx > 0:  # a steep fit through few points must not predict an unbounded rate at low load
        slope = min(slope, 0.8 * my / mx)
    return my - slope * mx, slope


@dataclass(frozen=True, slots=True)
class Curve:
    """One endpoint's predicted speed against load, ready for per-request use: two lines and a limit.
    Built with the ranking (every 250 ms); `predict` is a few multiplications per candidate."""

    tps: tuple[float, float] | None  # s per token = a + b x load
    ttft: tuple[float, float] | None  # TTFT s = a + b x load
    limit: int | None  # max concurrency (catalogue or learned)
    penalty: float  # 1 / OPTIMISM while few local samples, else 1
    claimed: bool = False  # the speed is the catalogue's claim only: never measured (TRIAL_CONCURRENCY)
    error_rate: float = 0.0  # attempts that fail (429s apart: capacity) ...
    hang_rate: float = 0.0  # ... of which time out (HANG_S each); the others fail about when a token would come
    # TTFT against the prompt's uncached tokens (telemetry/prefill.py), once a prefill rate is measured;
    # else `prefill_s_per_token` (the advertised rate) on top of the load line, else the load line alone.
    prefill: PrefillLine | None = None
    prefill_s_per_token: float | None = None

    def ttft_s(self, in_flight: int, uncached_tokens: int) -> float | None:
        """Predicted TTFT of a prompt with `uncached_tokens` not in this endpoint's cache, joining
        `in_flight` others."""
        if self.prefill is not None and self.prefill.per_token_s is not None:
            return self.prefill.ttft_s(uncached_tokens, in_flight)
        ttft = None if self.ttft is None else self.ttft[0] + self.ttft[1] * (in_flight + 1)
        if self.prefill_s_per_token is not None and uncached_tokens:
            return (ttft or 0.0) + uncached_tokens * self.prefill_s_per_token
        return ttft

    def s_per_prompt_token(self) -> float | None:
        """Seconds one uncached prompt token adds to TTFT: measured, else advertised, else unknown."""
        if self.prefill is not None and self.prefill.per_token_s is not None:
            return self.prefill.per_token_s
        return self.prefill_s_per_token

    def predict(self, in_flight: int, n_tokens: int, trial_limit: int | None = None,
                uncached_tokens: int = 0) -> Prediction:
        """What a request of `n_tokens` output tokens and `uncached_tokens` of prompt to prefill would
        get joining `in_flight` others (module doc). `trial_limit`: the most a `claimed` endpoint may
        take now (the router's fair share)."""
        load = in_flight + 1
        ttft = self.ttft_s(in_flight, uncached_tokens)
        if self.tps is None:
            return Prediction(None, ttft, load, math.inf, 0.0, math.inf)
        a, b = self.tps
        per_token = a + b * load
        e2e = (ttft or 0.0) + n_tokens * per_token
        marginal = in_flight * (n_tokens / 2.0) * b  # each other's remaining tokens, each b slower
        full = (self.limit is not None and load > self.limit) or \
            (self.claimed and trial_limit is not None and load > trial_limit)
        # Throughput is decode speed (OpenRouter's sense): TTFT is reported, ranked by `sort: latency`.
        clean = math.inf if full else (n_tokens * per_token + marginal) * self.penalty
        return Prediction(1.0 / per_token, ttft, load, e2e, marginal, clean * (1.0 + ERROR_PENALTY * self.error_rate),
                          clean)

    def fail_s(self, p: Prediction) -> float:
        """Seconds a failed attempt costs before its fallback starts."""
        if self.error_rate <= 0:
            return 0.0
        hangs = min(self.hang_rate, self.error_rate)
        return (hangs * HANG_S + (self.error_rate - hangs) * (p.ttft_s or 0.0)) / self.error_rate


def fallback_scores(clean: list[float], curves: list[Curve], predictions: list[Prediction]) -> list[float]:
    """The live choice's scores, from each candidate's `clean` one (inf: full or kept out): an
    attempt that fails falls back to the best of the others, so an endpoint failing a share `e` of
    its attempts costs (1 - e) x its own time + e x (the time the failure takes + the fallback's),
    not a flat factor: a 503 answered at once, with an endpoint as good as this one behind it, costs
    little; a hang, or a much slower fallback, costs much. With no other candidate (all full), the
    flat ERROR_PENALTY. Never less than its own time: failing is no way to reach a faster endpoint
    (that one is chosen directly)."""
    if all(c.error_rate <= 0 for c in curves):
        return clean
    best = min(range(len(clean)), key=clean.__getitem__)
    second = min((x for j, x in enumerate(clean) if j != best), default=math.inf)
    scores = list(clean)
    for i, c in enumerate(curves):
        e, own = c.error_rate, clean[i]
        if e <= 0 or math.isinf(own):
            continue
        alt = second if i == best else clean[best]
        p = predictions[i]
        scores[i] = p.score_s if math.isinf(alt) else (1.0 - e) * own + e * (c.fail_s(p) + max(alt, own))
    return scores


def curve(endpoint: Endpoint, model: SpeedModel | None, shared_tps: LoadFit | None,
          shared_ttft: LoadFit | None, error_rate: float = 0.0, capacity: int | None = None,
          hang_rate: float = 0.0, shared_prefill: PrefillFit | None = None) -> Curve:
    """The endpoint's curve from its local fits, the shared ones and the advertised prior (module doc)."""
    advertised = endpoint.advertised.tokens_per_second
    prior = 1.0 / advertised if advertised else None
    tps_line = _line(model.tps if model else None, shared_tps, None, prior, model.shape() if model else None)
    claimed = tps_line is None
    if tps_line is None and prior is not None:
        tps_line = (prior, DEFAULT_RELATIVE_SLOWDOWN * prior)
    ttft_line = _line(model.ttft if model else None, shared_ttft, 0.0)
    if ttft_line is None and endpoint.advertised.ttft_ms:
        ttft_line = (endpoint.advertised.ttft_ms / 1000.0, 0.0)
    penalty = 1.0 / OPTIMISM if model is not None and 0 < model.tps.w < CONFIDENT_WEIGHT else 1.0
    prefill = None if shared_prefill is None else shared_prefill.line()
    advertised_prefill = endpoint.advertised.prefill_tokens_per_second
    return Curve(tps_line, ttft_line, concurrency_limit(endpoint, capacity), penalty, claimed, error_rate,
                 hang_rate, prefill, None if advertised_prefill is None else 1.0 / advertised_prefill)


def predict(endpoint: Endpoint, model: SpeedModel | None, shared_tps: LoadFit | None,
            shared_ttft: LoadFit | None, in_flight: int, n_tokens: int, error_rate: float = 0.0,
            capacity: int | None = None, shared_prefill: PrefillFit | None = None,
            uncached_tokens: int = 0) -> Prediction:
    """`curve(...).predict(in_flight, n_tokens, uncached_tokens=...)`."""
    return curve(endpoint, model, shared_tps, shared_ttft, error_rate, capacity,
                 shared_prefill=shared_prefill).predict(in_flight, n_tokens, uncached_tokens=uncached_tokens)
