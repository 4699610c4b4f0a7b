"""Rolling windows of one endpoint's samples, summarised into `EndpointStats`.

What it does: `EndpointWindows` keeps one endpoint's `Bucket`s (bucket.py; default 10 s each, index
`int(t // bucket_s)`) for `max_window_s` (+1 bucket) and answers any window <= max_window_s (60,
300, 1800, ...) by merging the buckets that cover it. Old buckets are dropped (`prune`), so memory is
bounded by endpoints x buckets whatever the traffic. Summaries are incremental: per window length a
running aggregate of settled buckets is advanced (add the newly settled bucket, subtract the one
that left the window), so a summary costs about the same for 1800 s as for 60 s. Settled buckets
are kept frozen (compressed bytes, ~5-10x smaller).

What it does not do: no I/O, no caching of summaries, no in-flight or EWMA tracking (the stores do
that and pass them in). Window edges have bucket granularity: a sample is included while its bucket
overlaps (now - window_s, now], so samples up to window_s old are always in and samples older than
window_s + bucket_s are always out. A sample's time is its completion time (started_at + e2e_s).
"""

from __future__ import annotations

from collections.abc import Iterator

from gateway.telemetry.bucket import ENDPOINT_FAULTS, Bucket
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.telemetry.sketch import Sketch
from gateway.telemetry.stats import QUANTILES, EndpointStats, Percentiles, TokenTotals

DEFAULT_BUCKET_S = 10.0
DEFAULT_MAX_WINDOW_S = 1800.0
_MAX_AGGREGATES = 8  # distinct window lengths with a running aggregate, per endpoint


class _Aggregate:
    """Sum of the buckets with index in [lo, hi] (all settled)."""

    __slots__ = ("bucket", "hi", "lo")

    def __init__(self, lo: int, hi: int, bucket: Bucket) -> None:
        self.lo = lo
        self.hi = hi
        self.bucket = bucket


class EndpointWindows:
    """One endpoint's buckets, and merged views of the last `window_s` seconds.

    Settled buckets (older than the newest two) are kept frozen (`Bucket.freeze`) to save memory;
    accessors hand out `Bucket` objects either way.
    """

    __slots__ = ("_aggs", "_buckets", "_sealed_max", "bucket_s", "max_window_s", "newest")

    def __init__(self, bucket_s: float = DEFAULT_BUCKET_S,
                 max_window_s: float = DEFAULT_MAX_WINDOW_S) -> None:
        self.bucket_s = float(bucket_s)
        self.max_window_s = float(max_window_s)
        self._buckets: dict[int, Bucket | bytes] = {}
        self.newest: float | None = None
        self._aggs: dict[float, _Aggregate] = {}
        self._sealed_max = -(1 << 62)  # highest bucket index any aggregate covers

    def index(self, t: float) -> int:
        return int(t // self.bucket_s)

    def __len__(self) -> int:
        return len(self._buckets)

    def indices(self) -> list[int]:
        return list(self._buckets)

    def bucket(self, idx: int) -> Bucket | None:
        """Bucket `idx` (a fresh object when it was frozen: changing it changes nothing here)."""
        b = self._buckets.get(idx)
        return Bucket.thaw(b) if type(b) is bytes else b  # type: ignore[return-value]

    def items(self) -> Iterator[tuple[int, Bucket]]:
        for idx, b in list(self._buckets.items()):
            yield idx, (Bucket.thaw(b) if type(b) is bytes else b)  # type: ignore[misc]

    def _live(self, idx: int) -> Bucket | None:
        """Bucket `idx` as a stored, mutable object (thawed in place if it was frozen)."""
        b = self._buckets.get(idx)
        if type(b) is bytes:
            b = self._buckets[idx] = Bucket.thaw(b)
        return b  # type: ignore[return-value]

    # -- writing --------------------------------------------------------------------------------
    def add(self, sample: AttemptSample, t: float | None = None) -> None:
        if t is None:
            t = sample.started_at + sample.e2e_s
        idx = int(t // self.bucket_s)
        b = self._buckets.get(idx)
        if b is None:
            b = self._buckets[idx] = Bucket()
        elif type(b) is bytes:
            b = self._live(idx)
        b.add_sample(sample, t)  # type: ignore[union-attr]
        if self.newest is None or t > self.newest:
            self.newest = t
        if idx <= self._sealed_max:  # a late sample for a settled bucket: keep aggregates exact
            for agg in self._aggs.values():
                if agg.lo <= idx <= agg.hi:
                    agg.bucket.add_sample(sample, t)

    def merge_bucket(self, idx: int, delta: Bucket) -> None:
        """Add `delta` into bucket `idx` (copied; `delta` is not kept)."""
        if idx <= self._sealed_max:
            for agg in self._aggs.values():
                if agg.lo <= idx <= agg.hi:
                    agg.bucket.merge(delta)
        b = self._live(idx)
        if b is None:
            self._buckets[idx] = delta.copy()
        else:
            b.merge(delta)
        self.note_newest(delta.newest)

    def set_bucket(self, idx: int, bucket: Bucket | None) -> None:
        """Replace bucket `idx` (e.g. with a fresh read from Redis); None or empty removes it.

        The bucket object is adopted, not copied: the caller must not modify it afterwards.
        """
        if bucket is not None and bucket.is_empty():
            bucket = None
        old = self._buckets.pop(idx, None)
        if bucket is not None:
            self._buckets[idx] = bucket
            self.note_newest(bucket.newest)
        if idx <= self._sealed_max and (old is not None or bucket is not None):
            old_b = Bucket.thaw(old) if type(old) is bytes else old
            for agg in self._aggs.values():
                if agg.lo <= idx <= agg.hi:
                    if old_b is not None:
                        agg.bucket.subtract(old_b)  # type: ignore[arg-type]
                    if bucket is not None:
                        agg.bucket.merge(bucket)

    def pop_bucket(self, idx: int) -> Bucket | None:
        """Remove bucket `idx` and return it (aggregates stay exact)."""
        b = self.bucket(idx)
        if b is not None:
            self.set_bucket(idx, None)
        return b

    def merge_windows(self, other: EndpointWindows) -> None:
        for idx, b in other.items():
            self.merge_bucket(idx, b)
        self.note_newest(other.newest)

    def note_newest(self, t: float | None) -> None:
        if t is not None and (self.newest is None or t > self.newest):
            self.newest = t

    def prune(self, now: float) -> int:
        """Drop buckets too old for any window, freeze settled ones. Returns buckets dropped."""
        keep_from = int((now - self.max_window_s) // self.bucket_s) - 1
        settled = int(now // self.bucket_s) - 2
        buckets = self._buckets
        old = []
        for idx, b in buckets.items():
            if idx < keep_from:
                old.append(idx)
            elif idx <= settled and type(b) is not bytes:
                buckets[idx] = b.freeze()  # type: ignore[union-attr]
        for idx in old:
            del buckets[idx]
        if old:
            newest_dropped = max(old)
            stale = [w for w, agg in self._aggs.items() if agg.lo <= newest_dropped]
            for w in stale:
                del self._aggs[w]
            self._update_sealed_max()
        return len(old)

    def _update_sealed_max(self) -> None:
        self._sealed_max = max((a.hi for a in self._aggs.values()), default=-(1 << 62))

    # -- reading --------------------------------------------------------------------------------
    def clamp_window(self, window_s: float) -> float:
        return min(max(float(window_s), self.bucket_s), self.max_window_s)

    def aggregate(self, now: float, window_s: float) -> Bucket:
        """A new Bucket holding everything in the buckets overlapping (now - window_s, now]."""
        w = self.clamp_window(window_s)
        bs = self.bucket_s
        cur = int(now // bs)
        first = int((now - w) // bs)
        hi = cur - 2  # the newest two buckets stay out of the running aggregate (still filling)
        get = self.bucket
        if hi < first or not self._buckets:
            out = Bucket()
            for idx in range(first, cur + 1):
                b = get(idx)
                if b is not None:
                    out.merge(b)
            return out
        agg = self._aggs.get(w)
        if agg is None or first < agg.lo or hi < agg.hi or first > agg.hi + 1:
            # first use, clock went backwards, or the window moved past everything we summed
            total = Bucket()
            for idx in range(first, hi + 1):
                b = get(idx)
                if b is not None:
                    total.merge(b)
            if agg is None and len(self._aggs) >= _MAX_AGGREGATES:
                self._aggs.clear()
            agg = self._aggs[w] = _Aggregate(first, hi, total)
        else:
            for idx in range(agg.hi + 1, hi + 1):
                b = get(idx)
                if b is not None:
                    agg.bucket.merge(b)
            for idx in range(agg.lo, first):
                b = get(idx)
                if b is not None:
                    agg.bucket.subtract(b)
            agg.lo, agg.hi = first, hi
        self._update_sealed_max()
        out = agg.bucket.copy()
        for idx in range(hi + 1, cur + 1):
            b = get(idx)
            if b is not None:
                out.merge(b)
        return out

    def summary(self, now: float, window_s: float, *, in_flight: int = 0, ewma_ttft_ms: float | None = None,
                ewma_decode_tps: float | None = None) -> EndpointStats:
        return summarize(self.aggregate(now, window_s), window_s=self.clamp_window(window_s), now=now,
                         newest=self.newest, in_flight=in_flight, ewma_ttft_ms=ewma_ttft_ms,
                         ewma_decode_tps=ewma_decode_tps)


def _percentiles(sk: Sketch) -> Percentiles | None:
    if sk.count <= 0:
        return None
    return Percentiles.from_values(sk.quantiles(QUANTILES), sk.count)


def summarize(bucket: Bucket, *, window_s: float, now: float, newest: float | None, in_flight: int = 0,
              ewma_ttft_ms: float | None = None, ewma_decode_tps: float | None = None) -> EndpointStats:
    """Turn a merged bucket into the immutable stats policies read."""
    n = bucket.n
    requests = sum(n.values())
    cancelled = n.get(Outcome.CANCELLED.value, 0)
    client_errors = n.get(Outcome.CLIENT_ERROR.value, 0)
    accountable = requests - cancelled - client_errors
    errors = sum(n.get(o, 0) for o in ENDPOINT_FAULTS)

    def rate(c: int) -> float:
        return c / accountable if accountable > 0 else 0.0

    return EndpointStats(
        window_s=window_s,
        requests=requests,
        ok=n.get(Outcome.OK.value, 0),
        errors=errors,
        error_rate=rate(errors),
        rate_limited_rate=rate(n.get(Outcome.RATE_LIMITED.value, 0)),
        timeout_rate=rate(n.get(Outcome.TIMEOUT.value, 0)),
        in_flight=in_flight,
        age_s=None if newest is None else max(0.0, now - newest),
        ttft_ms=_percentiles(bucket.ttft_ms),
        ttfat_ms=_percentiles(bucket.ttfat_ms),
        decode_tps=_percentiles(bucket.decode_tps),
        e2e_ms=_percentiles(bucket.e2e_ms),
        ewma_ttft_ms=ewma_ttft_ms,
        ewma_decode_tps=ewma_decode_tps,
        tokens=TokenTotals(bucket.tok_in, bucket.tok_cached, bucket.tok_out, bucket.tok_reasoning,
                           bucket.tok_stay_in, bucket.tok_stay_cached, bucket.tok_cache_write),
        cost_usd=max(0.0, bucket.cost),
        cancelled=cancelled,
        client_errors=client_errors,
        fit_tps=bucket.fit_tps.copy() if bucket.fit_tps.w else None,
        fit_ttft=bucket.fit_ttft.copy() if bucket.fit_ttft.w else None,
        fit_prefill=bucket.fit_prefill.copy() if bucket.fit_prefill.w else None,
    )

