"""One endpoint's samples in one fixed time bucket: the unit telemetry is kept, merged and shared in.

A `Bucket` counts attempts by outcome, sums tokens and cost, and keeps one `Sketch` each for ttft_ms,
ttfat_ms, decode_tps and e2e_ms, plus the speed-vs-load fits (fit.py) and the TTFT-vs-prompt-size fit
(prefill.py); the input and cached tokens of turns that stayed on the endpoint holding their
session's cache give its cache hit ratio. Buckets merge and subtract
exactly, freeze to compressed bytes once settled, and convert to and from additive Redis hash fields
(redis_wire.py writes them with HINCRBY/HINCRBYFLOAT). `window.py` keeps a series of them per endpoint.
"""

from __future__ import annotations

import marshal
import zlib
from collections.abc import Iterable, Mapping

from gateway.telemetry.fit import LoadFit
from gateway.telemetry.prefill import PrefillFit
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.telemetry.sketch import Sketch

METRICS: tuple[str, ...] = ("ttft_ms", "ttfat_ms", "decode_tps", "e2e_ms")
OUTCOMES: tuple[str, ...] = tuple(o.value for o in Outcome)
ENDPOINT_FAULTS: tuple[str, ...] = (  # what error_rate counts: the endpoint's fault
    Outcome.SERVER_ERROR.value,
    Outcome.TIMEOUT.value,
    Outcome.CONNECT_ERROR.value,
    Outcome.RATE_LIMITED.value,
)
_OK = Outcome.OK.value
_TOKEN_FIELDS = {"in": "tok_in", "cin": "tok_cached", "cw": "tok_cache_write", "out": "tok_out",
                 "rsn": "tok_reasoning", "sin": "tok_stay_in", "scin": "tok_stay_cached"}


def sample_time(sample: AttemptSample) -> float:
    """The time a sample is filed under: when the attempt finished."""
    return sample.started_at + sample.e2e_s


class Bucket:
    """Everything recorded for one endpoint in one time bucket. Additive, so mergeable exactly."""

    __slots__ = ("cost", "decode_tps", "e2e_ms", "fit_prefill", "fit_tps", "fit_ttft", "n", "newest",
                 "tok_cache_write", "tok_cached", "tok_in", "tok_out", "tok_reasoning", "tok_stay_cached",
                 "tok_stay_in", "ttfat_ms", "ttft_ms")

    def __init__(self) -> None:
        self.n: dict[str, int] = {}  # outcome value -> attempts
        self.tok_in = 0
        self.tok_cached = 0  # prompt-cache reads among tok_in
        self.tok_cache_write = 0  # prompt-cache writes among tok_in
        self.tok_out = 0
        self.tok_reasoning = 0
        self.tok_stay_in = 0  # input of turns that stayed on the endpoint of their session's last turn ...
        self.tok_stay_cached = 0  # ... and how much of it the endpoint reported cached
        self.cost = 0.0
        self.ttft_ms = Sketch()
        self.ttfat_ms = Sketch()
        self.decode_tps = Sketch()
        self.e2e_ms = Sketch()
        # Speed against load (fit.py): 1/decode rate and TTFT (s) against the load each ran under.
        self.fit_tps = LoadFit()
        self.fit_ttft = LoadFit()
        self.fit_prefill = PrefillFit()  # TTFT (s) against uncached input tokens and load
        self.newest: float | None = None  # newest sample time (not stored in Redis fields)

    # -- building ------------------------------------------------------------------------------
    def add_sample(self, s: AttemptSample, t: float) -> None:
        n = self.n
        o = s.outcome
        n[o] = n.get(o, 0) + 1
        self.tok_in += s.input_tokens
        self.tok_cached += s.cached_input_tokens
        self.tok_cache_write += s.cache_write_input_tokens
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
        ttft = s.fitted_ttft_s  # none read late by a stall of the gateway's loop
        if ttft is not None:
            self.fit_ttft.add(s.load, ttft)
            if s.input_tokens > 0:  # usage known: the prompt's size is measured, not guessed
                self.fit_prefill.add(max(s.input_tokens - s.cached_input_tokens, 0), s.load, ttft)
        if s.stayed and s.input_tokens > 0:
            self.tok_stay_in += s.input_tokens
            self.tok_stay_cached += min(s.cached_input_tokens, s.input_tokens)
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
        self.tok_cache_write += other.tok_cache_write
        self.tok_out += other.tok_out
        self.tok_reasoning += other.tok_reasoning
        self.tok_stay_in += other.tok_stay_in
        self.tok_stay_cached += other.tok_stay_cached
        self.cost += other.cost
        self.ttft_ms.merge(other.ttft_ms)
        self.ttfat_ms.merge(other.ttfat_ms)
        self.decode_tps.merge(other.decode_tps)
        self.e2e_ms.merge(other.e2e_ms)
        self.fit_tps.merge(other.fit_tps)
        self.fit_ttft.merge(other.fit_ttft)
        self.fit_prefill.merge(other.fit_prefill)
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
        self.tok_cache_write -= other.tok_cache_write
        self.tok_out -= other.tok_out
        self.tok_reasoning -= other.tok_reasoning
        self.tok_stay_in -= other.tok_stay_in
        self.tok_stay_cached -= other.tok_stay_cached
        self.cost -= other.cost
        if not n:  # nothing left: clear float residue
            self.cost = 0.0
        self.ttft_ms.subtract(other.ttft_ms)
        self.ttfat_ms.subtract(other.ttfat_ms)
        self.decode_tps.subtract(other.decode_tps)
        self.e2e_ms.subtract(other.e2e_ms)
        self.fit_tps.subtract(other.fit_tps)
        self.fit_ttft.subtract(other.fit_ttft)
        self.fit_prefill.subtract(other.fit_prefill)

    def copy(self) -> Bucket:
        b = Bucket()
        b.n = dict(self.n)
        b.tok_in, b.tok_cached, b.tok_out, b.tok_reasoning = (
            self.tok_in, self.tok_cached, self.tok_out, self.tok_reasoning)
        b.tok_stay_in, b.tok_stay_cached = self.tok_stay_in, self.tok_stay_cached
        b.tok_cache_write = self.tok_cache_write
        b.cost = self.cost
        b.ttft_ms = self.ttft_ms.copy()
        b.ttfat_ms = self.ttfat_ms.copy()
        b.decode_tps = self.decode_tps.copy()
        b.e2e_ms = self.e2e_ms.copy()
        b.fit_tps = self.fit_tps.copy()
        b.fit_ttft = self.fit_ttft.copy()
        b.fit_prefill = self.fit_prefill.copy()
        b.newest = self.newest
        return b

    def freeze(self) -> bytes:
        """A compact immutable copy (marshal + zlib, ~5-10x smaller than the objects) for settled buckets."""
        return zlib.compress(marshal.dumps((
            tuple((str(o), c) for o, c in self.n.items()),  # str(): plain keys, not Outcome members
            self.tok_in, self.tok_cached, self.tok_out, self.tok_reasoning, self.cost, self.newest,
            self.ttft_ms.to_state(), self.ttfat_ms.to_state(), self.decode_tps.to_state(),
            self.e2e_ms.to_state(), self.fit_tps.state(), self.fit_ttft.state(),
            self.tok_stay_in, self.tok_stay_cached, self.fit_prefill.state(), self.tok_cache_write,
        )), 1)

    @classmethod
    def thaw(cls, blob: bytes) -> Bucket:
        (n, b_in, b_cached, b_out, b_reasoning, cost, newest, ttft, ttfat, tps, e2e, fit_tps,
         fit_ttft, stay_in, stay_cached, fit_prefill, cache_write) = marshal.loads(zlib.decompress(blob))
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
        b.tok_stay_in, b.tok_stay_cached, b.tok_cache_write = stay_in, stay_cached, cache_write
        b.fit_prefill = PrefillFit(*fit_prefill)
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

        Layout: `n:<outcome>`, `tok:in|cin|cw|out|rsn|sin|scin`, `cost`, `s:<metric>:<bin>`, `sum:<metric>`,
        `f:tps|ttft:<sum>` (fit.py), `f:pf:<sum>` (prefill.py).
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
        out.update(self.fit_prefill.fields("pf"))
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
                elif fit == "pf":
                    b.fit_prefill.add_field(total, v)
            elif head == "sum" and rest in METRICS:
                getattr(b, rest).add_field("", v)
        return b

    def __repr__(self) -> str:
        return f"Bucket(n={self.n}, ttft={self.ttft_ms!r})"


def merge_all(buckets: Iterable[Bucket]) -> Bucket:
    out = Bucket()
    for b in buckets:
        out.merge(b)
    return out
