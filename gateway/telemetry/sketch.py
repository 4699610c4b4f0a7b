"""A mergeable log-bucket quantile sketch (DDSketch-style) with ~1 % relative accuracy.

What it does: counts positive values in logarithmic buckets (`index = ceil(log_gamma(x))`), so any
quantile is answered within `RELATIVE_ACCURACY` of the true value, and two sketches merge exactly by
adding their bucket counts (replicas' data merge exactly, in memory or through Redis hash fields).
Counts can also be subtracted exactly, which sliding windows use to drop old buckets.

What it does not do: no I/O, no time handling, no thread safety. Values <= 0 are mapped to
`MIN_VALUE`; NaN and infinities are ignored. `sum`/`min`/`max` are informational: `min`/`max` are
exact only while the sketch was built by `add`/`merge` in memory (they become `None` after
`subtract` or `from_fields`); quantiles are clamped to [min, max] only while those are exact.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from itertools import accumulate

RELATIVE_ACCURACY = 0.01
GAMMA = (1 + RELATIVE_ACCURACY) / (1 - RELATIVE_ACCURACY)
_LOG_GAMMA = math.log(GAMMA)
_INV_LOG_GAMMA = 1.0 / _LOG_GAMMA
_MID_FACTOR = 2.0 / (GAMMA + 1.0)  # bucket i represents 2 * gamma**i / (gamma + 1)
MIN_VALUE = 1e-3  # values <= 0 (or tinier than this) are recorded as this
_INF = math.inf
_ceil = math.ceil
_log = math.log

# Field-name layout used by to_fields/from_fields: f"s:{name}:{index}" -> count, f"sum:{name}" -> sum.
BIN_PREFIX = "s:"
SUM_PREFIX = "sum:"


def bucket_index(x: float) -> int:
    """The bucket index of a value (already clamped to >= MIN_VALUE)."""
    return math.ceil(math.log(x) * _INV_LOG_GAMMA)


def bucket_value(index: int) -> float:
    """The representative value of a bucket: within RELATIVE_ACCURACY of anything in the bucket."""
    return math.exp(index * _LOG_GAMMA) * _MID_FACTOR


class Sketch:
    """Log-bucket counts plus count/sum/min/max. Exact merge and subtract by bin addition."""

    __slots__ = ("_bins", "_exact", "_hi", "_lo", "count", "sum")

    def __init__(self) -> None:
        self._bins: dict[int, int] = {}
        self.count = 0
        self.sum = 0.0
        self._lo = _INF  # smallest value added (meaningful while _exact)
        self._hi = -_INF
        self._exact = True  # False once bounds are unknown (after subtract / from_fields)

    @property
    def min(self) -> float | None:
        """Smallest value recorded, when known exactly (None if empty or unknown)."""
        return self._lo if self._exact and self.count > 0 else None

    @property
    def max(self) -> float | None:
        return self._hi if self._exact and self.count > 0 else None

    # -- building -------------------------------------------------------------------------------
    def add(self, x: float, n: int = 1) -> None:
        """Record value `x` (n times). Non-finite values are ignored; x <= 0 counts as MIN_VALUE."""
        if not x >= MIN_VALUE:  # tiny, zero, negative or NaN
            if x != x:
                return
            x = MIN_VALUE
        elif x == _INF:
            return
        bins = self._bins
        i = _ceil(_log(x) * _INV_LOG_GAMMA)
        bins[i] = bins.get(i, 0) + n
        self.count += n
        self.sum += x * n
        if x < self._lo:
            self._lo = x
        if x > self._hi:
            self._hi = x

    def merge(self, other: Sketch) -> None:
        """Add `other`'s data into this sketch (exact for counts)."""
        if other.count == 0:
            return
        bins = self._bins
        get = bins.get
        for i, c in other._bins.items():
            bins[i] = get(i, 0) + c
        if self.count == 0:
            self._exact = other._exact
        else:
            self._exact = self._exact and other._exact
        self._lo = min(self._lo, other._lo)
        self._hi = max(self._hi, other._hi)
        self.count += other.count
        self.sum += other.sum

    def subtract(self, other: Sketch) -> None:
        """Remove data previously merged in (exact for counts; min/max become unknown)."""
        if other.count == 0:
            return
        bins = self._bins
        for i, c in other._bins.items():
            left = bins.get(i, 0) - c
            if left:
                bins[i] = left
            else:
                bins.pop(i, None)
        self.count -= other.count
        if self.count <= 0:
            self.count = 0
            self.sum = 0.0
            bins.clear()
            self._lo, self._hi, self._exact = _INF, -_INF, True
        else:
            self.sum -= other.sum
            self._exact = False

    def copy(self) -> Sketch:
        new = Sketch()
        new._bins = dict(self._bins)
        new.count, new.sum = self.count, self.sum
        new._lo, new._hi, new._exact = self._lo, self._hi, self._exact
        return new

    def to_state(self) -> tuple[tuple[tuple[int, int], ...], int, float, float, float, bool]:
        """Everything, as plain values (for compact storage, e.g. with marshal)."""
        return tuple(self._bins.items()), self.count, self.sum, self._lo, self._hi, self._exact

    @classmethod
    def from_state(cls, state: tuple[tuple[tuple[int, int], ...], int, float, float, float, bool]) -> Sketch:
        sk = cls()
        bins, sk.count, sk.sum, sk._lo, sk._hi, sk._exact = state
        sk._bins = dict(bins)
        return sk

    # -- reading --------------------------------------------------------------------------------
    def bins(self) -> dict[int, int]:
        """A copy of the non-zero bins, index -> count."""
        return {i: c for i, c in self._bins.items() if c}

    def quantile(self, q: float) -> float | None:
        """The value at quantile q in [0, 1], or None when empty."""
        return self.quantiles((q,))[0] if self.count else None

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """Several quantiles at once (C-level sort, prefix sums and bisection). Empty -> []."""
        count = self.count
        if count <= 0:
            return []
        bins = self._bins
        keys = sorted(bins)
        counts = list(map(bins.__getitem__, keys))
        cum = list(accumulate(counts))
        last = len(keys) - 1
        out: list[float] = []
        for q in qs:
            rank = (0.0 if q <= 0 else 1.0 if q >= 1 else q) * (count - 1)
            pos = bisect_right(cum, rank)  # first bin whose cumulative count exceeds the rank
            out.append(self._clamp(bucket_value(keys[pos if pos <= last else last])))
        return out

    def _clamp(self, v: float) -> float:
        if self._exact:
            if v < self._lo:
                return float(self._lo)
            if v > self._hi:
                return float(self._hi)
        return v

    def __len__(self) -> int:
        return len(self._bins)

    def __repr__(self) -> str:
        return f"Sketch(count={self.count}, bins={len(self._bins)}, sum={self.sum:g})"

    # -- Redis hash fields ------------------------------------------------------------------------
    def to_fields(self, name: str) -> dict[str, int | float]:
        """Additive fields for a Redis hash: HINCRBY the ints, HINCRBYFLOAT the floats."""
        out: dict[str, int | float] = {f"{BIN_PREFIX}{name}:{i}": c for i, c in self._bins.items() if c}
        if self.sum:
            out[f"{SUM_PREFIX}{name}"] = float(self.sum)
        return out

    def add_field(self, rest: str, value: str | int | float) -> None:
        """Apply one field already split from its prefix: `rest` is "<index>" for bins, "" for sum."""
        if rest:
            c = int(value)
            if c:
                bins = self._bins
                i = int(rest)
                bins[i] = bins.get(i, 0) + c
                self.count += c
                self._exact = False
        else:
            self.sum += float(value)

    @classmethod
    def from_fields(cls, name: str, fields: Mapping[str, str | int | float]) -> Sketch:
        """Rebuild from `to_fields(name)` output (other fields are ignored)."""
        sk = cls()
        bin_prefix = f"{BIN_PREFIX}{name}:"
        sum_field = f"{SUM_PREFIX}{name}"
        for f, v in fields.items():
            if f.startswith(bin_prefix):
                sk.add_field(f[len(bin_prefix):], v)
            elif f == sum_field:
                sk.add_field("", v)
        return sk
