"""Time-bucketed rolling windows of attempt samples, summarised into `EndpointStats`.

What it does: `Bucket` aggregates the samples of one endpoint in one fixed time bucket (default 10 s,
index `int(t // bucket_s)`): counts by outcome, token and cost sums, and one `Sketch` each for
ttft_ms, ttfat_ms, decode_tps and e2e_ms. Buckets merge/subtract exactly and convert to/from additive
Redis hash fields. `EndpointWindows` keeps one endpoint's buckets for `max_window_s` (+1 bucket) and
answers any window <= max_window_s (60, 300, 1800, ...) by merging the buckets that cover it. Old
buckets are dropped (`prune`), so memory is bounded by endpoints x buckets whatever the traffic.
Summaries are incremental: per window length a running aggregate of settled buckets is advanced
(add the newly settled bucket, subtract the one that left the window), so a summary costs about the
same for 1800 s as for 60 s. Settled buckets are kept frozen (compressed bytes, ~5-10x smaller).

What it does not do: no I/O, no caching of summaries, no in-flight or EWMA tracking (the stores do
that and pass them in). Window edges have bucket granularity: a sample is included while its bucket
overlaps (now - window_s, now], so samples up to window_s old are always in and samples older than
window_s + bucket_s are always out. A sample's time is its completion time (started_at + e2e_s).
"""

from __future__ import annotations

import marshal
import zlib
from collections.abc import Iterable, Iterator, Mapping

from gateway.telemetry.fit import LoadFit
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.telemetry.sketch import Sketch
from gateway.telemetry.stats import QUANTILES, EndpointStats, Percentiles, TokenTotals

DEFAULT_BUCKET_S = 10.0
DEFAULT_MAX_WINDOW_S = 1800.0
METRICS: tuple[str, ...] = ("ttft_ms", "ttfat_ms", "decode_tps", "e2e_ms")
OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)
ENDPOINT_FAULTS: tuple[str, ...] = (  # what error_rate counts: the endpoint's fault
    Outcome.SERVER_ERROR.value,
    Outcome.TIMEOUT.value,
    Outcome.CONNECT_ERROR.value,
    Outcome.RATE_LIMITED.value,
)
_OK = Outcome.OK.value
_TOKEN_FIELDS = {"in": "tok_in", "cin": "tok_cached", "out": "tok_out", "rsn": "tok_reasoning"}
_MAX_AGGREGATES = 8  # distinct window lengths with a running aggregate, per endpoint


def sample_time(sample: AttemptSample) -> float:
    """The time a sample is filed under: when the attempt finished."""
    return sample.started_at + sample.e2e_s


class Bucket:
    """Everything recorded for one endpoint in one time bucket. Additive, so mergeable exactly."""

    __slots__ = ("cost", "decode_tps", "e2e_ms", "fit_tps", "fit_ttft", "n", "newest", "tok_cached", "tok_in",
                 "tok_out", "tok_reasoning", "ttfat_ms", "ttft_ms")

    def __init__(self) -> None:
        self.n: dict[str, int] = {}  # outcome value -> attempts
        self.tok_in = 0
        self.tok_cached = 0
        self.tok_out = 0
        self.tok_reasoning = 0
        self.cost = 0.0
        self.ttft_ms = Sketch()
        self.ttfat_ms = Sketch()
        self.decode_tps = Sketch()
        self.e2e_ms = Sketch()
        # Speed against load (fit.py): 1/decode rate and TTFT (s) against the load each ran under.
        self.fit_tps = LoadFit()
        self.fit_ttft = LoadFit()
        self.newest: float | None = None  # newest sample time (not stored in Redis fields)

    # -- building ------------------------------------------------------------------------------
    def add_sample(self, s: AttemptSample, t: float) -> None:
        n = self.n
        o = s.outcome
        n[o] = n.get(o, 0) + 1
        self.tok_in += s.input_tokens
        self.tok_cached += s.cached_input_tokens
        self.tok_out += s.output_tokens
        self.tok_reasoning += s.reasoning_tokens
        cost = s.cost_usd
        if cost and cost - cost == 0.0:  # finite and non-zero (NaN/inf would poison the sums)
            self.cost += cost
        if s.ttft_s is not None:
            self.ttft_ms.add(s.ttft_s * 1000.0)
        if s.ttfat_s is not None:
            self.ttfat_ms.add(s.ttfat_s * 1000.0)
        if s.decode_tps is not None:
            self.decode_tps.add(s.decode_tps)
            if s.decode_tps > 0:
                self.fit_tps.add(s.load, 1.0 / s.decode_tps)
        if s.ttft_s is not None:
            self.fit_ttft.add(s.load, s.ttft_s)
        if o == _OK:
            self.e2e_ms.add(s.e2e_s * 1000.0)
        if self.newest is None or t > self.newest:
            self.newest = t

    def merge(self, other: Bucket) -> None:
        n = self.n
        for o, c in other.n.items():
            n[o] = n.get(o, 0) + c
        self.tok_in += other.tok_in
        self.tok_cached += other.tok_cached
        self.tok_out += other.tok_out
        self.tok_reasoning += other.tok_reasoning
        self.cost += other.cost
        self.ttft_ms.merge(other.ttft_ms)
        self.ttfat_ms.merge(other.ttfat_ms)
        self.decode_tps.merge(other.decode_tps)
        self.e2e_ms.merge(other.e2e_ms)
        self.fit_tps.merge(other.fit_tps)
        self.fit_ttft.merge(other.fit_ttft)
        if other.newest is not None and (self.newest is None or other.newest > self.newest):
            self.newest = other.newest

    def subtract(self, other: Bucket) -> None:
        """Remove a bucket previously merged in (newest is left as is)."""
        n = self.n
        for o, c in other.n.items():
            left = n.get(o, 0) - c
            if left > 0:
                n[o] = left
            else:
                n.pop(o, None)
        self.tok_in -= other.tok_in
        self.tok_cached -= other.tok_cached
        self.tok_out -= other.tok_out
        self.tok_reasoning -= other.tok_reasoning
        self.cost -= other.cost
        if not n:  # nothing left: clear float residue
            self.cost = 0.0
        self.ttft_ms.subtract(other.ttft_ms)
        self.ttfat_ms.subtract(other.ttfat_ms)
        self.decode_tps.subtract(other.decode_tps)
        self.e2e_ms.subtract(other.e2e_ms)
        self.fit_tps.subtract(other.fit_tps)
        self.fit_ttft.subtract(other.fit_ttft)

    def copy(self) -> Bucket:
        b = Bucket()
        b.n = dict(self.n)
        b.tok_in, b.tok_cached, b.tok_out, b.tok_reasoning = (
            self.tok_in, self.tok_cached, self.tok_out, self.tok_reasoning)
        b.cost = self.cost
        b.ttft_ms = self.ttft_ms.copy()
        b.ttfat_ms = self.ttfat_ms.copy()
        b.decode_tps = self.decode_tps.copy()
        b.e2e_ms = self.e2e_ms.copy()
        b.fit_tps = self.fit_tps.copy()
        b.fit_ttft = self.fit_ttft.copy()
        b.newest = self.newest
        return b

    def freeze(self) -> bytes:
        """A compact immutable copy (marshal + zlib, ~5-10x smaller than the objects) for settled buckets."""
        return zlib.compress(marshal.dumps((
            tuple((str(o), c) for o, c in self.n.items()),  # str(): plain keys, not Outcome members
            self.tok_in, self.tok_cached, self.tok_out, self.tok_reasoning, self.cost, self.newest,
            self.ttft_ms.to_state(), self.ttfat_ms.to_state(), self.decode_tps.to_state(),
            self.e2e_ms.to_state(), self.fit_tps.state(), self.fit_ttft.state(),
        )), 1)

    @classmethod
    def thaw(cls, blob: bytes) -> Bucket:
        (n, b_in, b_cached, b_out, b_reasoning, cost, newest, ttft, ttfat, tps, e2e, fit_tps,
         fit_ttft) = marshal.loads(zlib.decompress(blob))
        b = cls()
        b.n = dict(n)
        b.tok_in, b.tok_cached, b.tok_out, b.tok_reasoning = b_in, b_cached, b_out, b_reasoning
        b.cost, b.newest = cost, newest
        b.ttft_ms = Sketch.from_state(ttft)
        b.ttfat_ms = Sketch.from_state(ttfat)
        b.decode_tps = Sketch.from_state(tps)
        b.e2e_ms = Sketch.from_state(e2e)
        b.fit_tps = LoadFit(*fit_tps)
        b.fit_ttft = LoadFit(*fit_ttft)
        return b

    # -- reading --------------------------------------------------------------------------------
    @property
    def requests(self) -> int:
        return sum(self.n.values())

    def count(self, outcome: str) -> int:
        return self.n.get(outcome, 0)

    def is_empty(self) -> bool:
        return not any(self.n.values())

    def sketch(self, name: str) -> Sketch:
        if name not in METRICS:
            raise KeyError(name)
        sk: Sketch = getattr(self, name)
        return sk

    # -- Redis hash fields ------------------------------------------------------------------------
    def to_fields(self) -> dict[str, int | float]:
        """Additive hash fields (ints for HINCRBY, floats for HINCRBYFLOAT); zeros are left out.

        Layout: `n:<outcome>`, `tok:in|cin|out|rsn`, `cost`, `s:<metric>:<bin>`, `sum:<metric>`,
        `f:tps|ttft:<sum>` (fit.py).
        """
        out: dict[str, int | float] = {f"n:{o}": c for o, c in self.n.items() if c}
        for short, attr in _TOKEN_FIELDS.items():
            v = getattr(self, attr)
            if v:
                out[f"tok:{short}"] = v
        if self.cost:
            out["cost"] = float(self.cost)
        for name in METRICS:
            out.update(getattr(self, name).to_fields(name))
        out.update(self.fit_tps.fields("tps"))
        out.update(self.fit_ttft.fields("ttft"))
        return out

    @classmethod
    def from_fields(cls, fields: Mapping[str, str | int | float]) -> Bucket:
        """Rebuild from hash fields (as HGETALL returns them, decoded). Unknown fields are ignored."""
        b = cls()
        n = b.n
        for f, v in fields.items():
            head, _, rest = f.partition(":")
            if head == "s":
                name, _, idx = rest.rpartition(":")
                if name in METRICS:
                    getattr(b, name).add_field(idx, v)
            elif head == "n":
                c = int(v)
                if c:
                    n[rest] = n.get(rest, 0) + c
            elif head == "tok":
                attr = _TOKEN_FIELDS.get(rest)
                if attr:
                    setattr(b, attr, getattr(b, attr) + int(v))
            elif head == "cost":
                b.cost += float(v)
            elif head == "f":
                fit, _, total = rest.partition(":")
                if fit in ("tps", "ttft"):
                    getattr(b, f"fit_{fit}").add_field(total, v)
            elif head == "sum" and rest in METRICS:
                getattr(b, rest).add_field("", v)
        return b

    def __repr__(self) -> str:
        return f"Bucket(n={self.n}, ttft={self.ttft_ms!r})"


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
        ok=n.get(_OK, 0),
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
        tokens=TokenTotals(bucket.tok_in, bucket.tok_cached, bucket.tok_out, bucket.tok_reasoning),
        cost_usd=max(0.0, bucket.cost),
        cancelled=cancelled,
        client_errors=client_errors,
        fit_tps=bucket.fit_tps.copy() if bucket.fit_tps.w else None,
        fit_ttft=bucket.fit_ttft.copy() if bucket.fit_ttft.w else None,
    )


def merge_all(buckets: Iterable[Bucket]) -> Bucket:
    out = Bucket()
    for b in buckets:
        out.merge(b)
    return out
