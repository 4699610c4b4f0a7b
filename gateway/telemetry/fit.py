"""Least-squares sums of a speed figure against load: the additive core of the speed-vs-load model.

What it does: `LoadFit` keeps the six sums (weight, Σx, Σy, Σx², Σxy, Σy²) of a straight-line fit of
`y` against `x` = requests in flight while an attempt ran (AttemptSample.load). The telemetry buckets keep two per
endpoint -- `y` = 1/decode rate (s per token; close to linear in load on batched servers) and
`y` = TTFT in seconds -- so fits merge exactly across buckets and replicas like every other field
(Redis fields `f:<fit>:<sum>`). `scale()` gives exponential forgetting to a local running fit.

What it does not do: decide what a prediction is used for (routing/speed.py), or any I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

# Load must have varied by about half a request (variance in requests²) for a slope to be measurable.
MIN_VARIANCE = 0.25
# A slope counts as measured once it is this many standard errors from zero: a slope fitted to noise
# (a flat endpoint on a busy machine) would otherwise make a fast endpoint look slow at load.
CONFIDENT_T = 2.0
SUMS = ("w", "sx", "sy", "sxx", "sxy", "syy")


class SumFields:
    """A fit's Redis hash fields (`f:<name>:<sum>`), for a fit whose `__slots__` are its sums, the
    first the weight `w`."""

    __slots__: tuple[str, ...] = ()
    w: float

    def fields(self, name: str) -> Iterator[tuple[str, float]]:
        """All zero when empty, so then none."""
        if self.w:
            for s in self.__slots__:
                yield f"f:{name}:{s}", float(getattr(self, s))

    def add_field(self, total: str, value: str | float) -> None:
        if total in self.__slots__:
            setattr(self, total, getattr(self, total) + float(value))


class LoadFit(SumFields):
    """Sums of a weighted straight-line fit y = a + b·x. Additive; `scale` forgets."""

    __slots__ = SUMS

    def __init__(self, w: float = 0.0, sx: float = 0.0, sy: float = 0.0, sxx: float = 0.0,
                 sxy: float = 0.0, syy: float = 0.0) -> None:
        self.w, self.sx, self.sy, self.sxx, self.sxy, self.syy = w, sx, sy, sxx, sxy, syy

    def add(self, x: float, y: float, weight: float = 1.0) -> None:
        self.w += weight
        self.sx += weight * x
        self.sy += weight * y
        self.sxx += weight * x * x
        self.sxy += weight * x * y
        self.syy += weight * y * y

    def scale(self, factor: float) -> None:
        self.w *= factor
        self.sx *= factor
        self.sy *= factor
        self.sxx *= factor
        self.sxy *= factor
        self.syy *= factor

    def scale_y(self, factor: float) -> None:
        """Every y times `factor`: the same line, relative to its level, at a new level."""
        self.sy *= factor
        self.sxy *= factor
        self.syy *= factor * factor

    def merge(self, other: LoadFit) -> None:
        self.w += other.w
        self.sx += other.sx
        self.sy += other.sy
        self.sxx += other.sxx
        self.sxy += other.sxy
        self.syy += other.syy

    def subtract(self, other: LoadFit) -> None:
        self.merge(LoadFit(*(-v for v in other.state())))
        if self.w < 1e-9:  # nothing left: clear float residue
            self.w = self.sx = self.sy = self.sxx = self.sxy = self.syy = 0.0

    def copy(self) -> LoadFit:
        return LoadFit(*self.state())

    def state(self) -> tuple[float, float, float, float, float, float]:
        return self.w, self.sx, self.sy, self.sxx, self.sxy, self.syy

    # -- reading --------------------------------------------------------------------------------
    def mean(self) -> tuple[float, float] | None:
        """(mean x, mean y), or None without data."""
        if self.w < 1e-9:
            return None
        return self.sx / self.w, self.sy / self.w

    def slope(self) -> float | None:
        """The fitted slope, or None while load has not varied enough to measure one."""
        if self.w < 1e-9:
            return None
        mx = self.sx / self.w
        var = self.sxx / self.w - mx * mx
        if var < MIN_VARIANCE:
            return None
        return (self.sxy / self.w - mx * self.sy / self.w) / var

    def confident_slope(self) -> float | None:
        """The slope once it is `CONFIDENT_T` standard errors above zero (and over two samples' weight),
        else None: noise must not pass for a slow-down with load, nor a flat fit through samples that
        all ran at about one load for a measured "no slow-down"."""
        slope = self.slope()
        if slope is None or self.w <= 2.0:
            return None
        w = self.w
        mx, my = self.sx / w, self.sy / w
        var_x = self.sxx / w - mx * mx
        var_y = self.syy / w - my * my
        residual = max(0.0, var_y - slope * slope * var_x) * w / (w - 2.0)
        se = math.sqrt(residual / (w * var_x))
        return slope if slope > 0 and slope >= CONFIDENT_T * se else None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, LoadFit) and self.state() == other.state()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"LoadFit(w={self.w:.2f}, mean={self.mean()}, slope={self.slope()})"
