"""Least-squares sums of TTFT against prompt size and load: the additive core of the TTFT curve.

What it does: `PrefillFit` keeps the ten sums of a weighted fit of

    TTFT (s) = base + uncached input tokens / prefill rate + queueing per request in flight x load

(x1 = uncached input in thousands of tokens: input minus the cached tokens the provider reported;
x2 = the load the attempt ran under, AttemptSample.load). Like `LoadFit` (fit.py) the sums merge
exactly across buckets and replicas (Redis fields `f:pf:<sum>`), subtract, and forget by `scale()`.
`line()` solves the normal equations: the prefill slope once it is measured -- prompt sizes have
varied, and the slope stands `CONFIDENT_T` standard errors above zero, so a flat endpoint under noise
is not given a finite prefill rate -- and the load term only once load has varied too (else it is
folded into the base).

What it does not do: decide how a prediction is used (routing/speed.py), or any I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.telemetry.fit import CONFIDENT_T, MIN_VARIANCE, SumFields

SUMS = ("w", "s1", "s2", "sy", "s11", "s12", "s22", "s1y", "s2y", "syy")
KILO = 1000.0
# Prompt sizes must have varied by about 250 tokens (variance in ktokens²) to measure a prefill rate.
MIN_SIZE_VARIANCE = 0.0625


@dataclass(frozen=True, slots=True)
class PrefillLine:
    """A fitted TTFT curve: seconds = base_s + per_token_s x uncached tokens + queue_s x load."""

    base_s: float
    per_token_s: float | None  # None: not measured (prompt sizes never varied, or no slope beyond noise)
    queue_s: float  # seconds per request in flight (0 when load never varied)
    samples: float  # the fit's weight

    @property
    def prefill_tps(self) -> float | None:
        return None if not self.per_token_s else 1.0 / self.per_token_s

    def ttft_s(self, uncached_tokens: float, load: float) -> float:
        return self.base_s + (self.per_token_s or 0.0) * uncached_tokens + self.queue_s * load


class PrefillFit(SumFields):
    """Sums of a weighted fit y = a + b1·x1 + b2·x2. Additive; `scale` forgets."""

    __slots__ = SUMS

    def __init__(self, *values: float) -> None:
        for name, v in zip(SUMS, values or (0.0,) * len(SUMS), strict=True):
            setattr(self, name, v)

    def add(self, uncached_tokens: float, load: float, ttft_s: float, weight: float = 1.0) -> None:
        x1, x2, y = uncached_tokens / KILO, load, ttft_s
        self.w += weight
        self.s1 += weight * x1
        self.s2 += weight * x2
        self.sy += weight * y
        self.s11 += weight * x1 * x1
        self.s12 += weight * x1 * x2
        self.s22 += weight * x2 * x2
        self.s1y += weight * x1 * y
        self.s2y += weight * x2 * y
        self.syy += weight * y * y

    def state(self) -> tuple[float, ...]:
        return tuple(getattr(self, s) for s in SUMS)

    def scale(self, factor: float) -> None:
        for s in SUMS:
            setattr(self, s, getattr(self, s) * factor)

    def merge(self, other: PrefillFit) -> None:
        for s in SUMS:
            setattr(self, s, getattr(self, s) + getattr(other, s))

    def subtract(self, other: PrefillFit) -> None:
        for s in SUMS:
            setattr(self, s, getattr(self, s) - getattr(other, s))
        if self.w < 1e-9:  # nothing left: clear float residue
            self.scale(0.0)

    def copy(self) -> PrefillFit:
        return PrefillFit(*self.state())

    # -- reading --------------------------------------------------------------------------------
    def line(self) -> PrefillLine | None:
        """The fitted curve (module doc), or None without data."""
        w = self.w
        if w < 0.5:
            return None
        m1, m2, my = self.s1 / w, self.s2 / w, self.sy / w
        v11 = self.s11 / w - m1 * m1
        v22 = self.s22 / w - m2 * m2
        v12 = self.s12 / w - m1 * m2
        c1y = self.s1y / w - m1 * my
        c2y = self.s2y / w - m2 * my
        vyy = self.syy / w - my * my
        b1: float | None = None
        b2 = 0.0
        det = v11 * v22 - v12 * v12
        if v11 >= MIN_SIZE_VARIANCE and v22 >= MIN_VARIANCE and det > 1e-9 * v11 * v22:
            b1 = (c1y * v22 - c2y * v12) / det
            b2 = (c2y * v11 - c1y * v12) / det
            residual = vyy - b1 * c1y - b2 * c2y
            var_b1 = v22 / det
        elif v11 >= MIN_SIZE_VARIANCE:  # load never varied: size alone
            b1 = c1y / v11
            residual = vyy - b1 * c1y
            var_b1 = 1.0 / v11
        elif v22 >= MIN_VARIANCE:  # size never varied: load alone
            b2 = c2y / v22
            residual = 0.0
            var_b1 = 0.0
        else:
            residual = var_b1 = 0.0
        if b1 is not None:
            dof = w - 3.0
            se = math.sqrt(max(residual, 0.0) * w / dof * var_b1 / w) if dof > 0 else math.inf
            if b1 <= 0 or b1 < CONFIDENT_T * se:
                b1 = None  # no slope beyond noise: size does not measurably matter (yet)
                b2 = c2y / v22 if v22 >= MIN_VARIANCE else 0.0
        b2 = max(b2, 0.0)
        base = my - (b1 or 0.0) * m1 - b2 * m2
        per_token = None if b1 is None else b1 / KILO
        if base < 0.0:  # a steep slope through few points must not promise less than nothing
            base = 0.0
        return PrefillLine(base, per_token, b2, w)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrefillFit) and self.state() == other.state()

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"PrefillFit(w={self.w:.2f}, line={self.line()})"
