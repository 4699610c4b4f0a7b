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

`fit_line` makes a line (s per token, or TTFT, against load) of the three; curve.py turns the lines
into the per-request predictions the router ranks by.

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

from gateway.telemetry.fit import LoadFit

# Per-user slowdown per extra concurrent request, relative, until the model has seen load vary.
# (A 235B MoE on four GPUs: 112 tok/s for one user, 71 at 64 -> ~0.9% per extra user.)
DEFAULT_RELATIVE_SLOWDOWN = 0.01
DECAY = 0.85  # weight kept by old samples at each new one: ~7 samples of memory ...
HALF_LIFE_S = 3.0  # ... and halved every 3 s: a sample after a pause (exploration) outweighs the old
FORGET_S = 10.0  # a sample after this much silence starts the local fit afresh
# A sample this many times slower than the local fit predicts at its load: the endpoint changed. A
# tier slowed to a third is well past it; noise of a busy machine over half a second of decode is not.
SURPRISE = 2.0
CAPACITY_PROBE_S = 10.0  # without a 429 for this long, a learned capacity grows by one ...
CAPACITY_PROBE_MAX_S = 80.0  # ... after each probe a 429 answered, twice as long, up to this
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
        line = fit_line(self.tps, None, slope) if slope is not None else None
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
            line = fit_line(fit, None, slope)
        elif self._shape is not None:
            line = line_through(mx, my, self._shape)
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


def line_through(mx: float, my: float, shape: float) -> tuple[float, float]:
    """The line (y at x=0, slope) through the level (mx, my) whose slope is `shape` x its value at 0."""
    at_zero = my / (1.0 + shape * mx)
    return at_zero, at_zero * shape


def fit_line(local: LoadFit | None, shared: LoadFit | None, default_slope: float | None,
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
        slope = line_through(mx, my, shape)[1]
    if slope is None:
        slope = DEFAULT_RELATIVE_SLOWDOWN * my if default_slope is None else default_slope
        if prior is not None and mx >= 1.0 and my <= prior * (1.0 + PLAUSIBLE_SLOWDOWN * mx):
            slope = max(slope, (my - prior) / mx)
    slope = max(slope, 0.0)  # an endpoint never gets faster per user by sharing it
    if mx > 0:  # a steep fit through few points must not predict an unbounded rate at low load
        slope = min(slope, 0.8 * my / mx)
    return my - slope * mx, slope
