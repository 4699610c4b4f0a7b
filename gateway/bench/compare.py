"""`--compare A B`: A's speed multiple against its price multiple at each level, and a verdict.

At each level both targets measured: speed_x = A's per-user decode p50 / B's, price_x = A's cost per
1M output tokens / B's (hourly pricing makes it vary by level), plus the aggregate-throughput and
end-to-end multiples for context. A is "worth it" at a level when speed_x >= price_x (each dollar
buys at least as much per-user speed as on B) and A failed no more requests than B (+1 point):
a tier that is fast for the requests it admits but refuses the rest (rate limits) is not a bargain.
The verdict is one line, e.g.

    ultra is 3.9x-4.0x as fast per user as std at 8.0x the price per 1M output tokens:
    not worth it at any level

Does: the arithmetic and the wording. Does not: measure, print or decide on missing data (a level
where either side has no decode rate or no price is reported as such, not guessed).
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.bench.models import Comparison, LevelComparison, LevelStats


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b <= 0:
        return None
    return a / b


ERROR_MARGIN = 0.01  # A may fail up to 1 point more of its requests than B and still be "worth it"


def compare_level(a: LevelStats, b: LevelStats) -> LevelComparison:
    speed = _ratio(a.decode_tps_p50, b.decode_tps_p50)
    price = _ratio(a.cost_per_1m_output, b.cost_per_1m_output)
    if a.cost_per_1m_output == 0 and b.cost_per_1m_output == 0:
        price = 1.0  # both free: the same price
    worth = None if speed is None or price is None else speed >= price
    if worth and a.error_rate > b.error_rate + ERROR_MARGIN:
        worth = False
    return LevelComparison(
        level=a.level,
        speed_x=speed,
        aggregate_x=_ratio(a.aggregate_tps, b.aggregate_tps),
        e2e_x=_ratio(b.e2e_ms_p50, a.e2e_ms_p50),
        price_x=price,
        worth_it=worth,
        error_rate_a=a.error_rate,
        error_rate_b=b.error_rate,
    )


def _times(value: float) -> str:
    return f"{value:.1f}x" if value >= 1 else f"{value:.2f}x"  # 0.06x must not read as 0.1x


def _span(values: Sequence[float]) -> str:
    low, high = _times(min(values)), _times(max(values))
    return low if low == high else f"{low}-{high}"


def _levels(rows: Sequence[LevelComparison]) -> str:
    return "c=" + ",".join(str(r.level) for r in rows)


def verdict(a: str, b: str, rows: Sequence[LevelComparison]) -> str:
    speeds = [r.speed_x for r in rows if r.speed_x is not None]
    prices = [r.price_x for r in rows if r.price_x is not None]
    if not speeds:
        return f"{a} vs {b}: no level where both produced tokens; no verdict"
    slower = " (slower)" if max(speeds) < 1.0 else ""
    text = f"{a} is {_span(speeds)} as fast per user as {b}{slower}"
    if not prices:
        return f"{text}; no price for both, so no verdict (use --price, --hourly-cost or --catalogue)"
    text += f" at {_span(prices)} the price per 1M output tokens"
    worth = [r for r in rows if r.worth_it is True]
    not_worth = [r for r in rows if r.worth_it is False]
    unknown = [r for r in rows if r.worth_it is None]
    if not worth and not not_worth:
        return f"{text}: no level with both speed and price measured; no verdict"
    if worth and not not_worth:
        judgement = f"worth it at every level measured ({_levels(worth)})"
    elif not_worth and not worth:
        judgement = "not worth it at any level measured"
    else:
        judgement = f"worth it at {_levels(worth)}, not at {_levels(not_worth)}"
    if unknown:
        judgement += f"; no data at {_levels(unknown)}"
    failing = [r for r in rows if r.error_rate_a > r.error_rate_b + ERROR_MARGIN]
    if failing:
        judgement += f"; {a} failed " + ", ".join(f"{r.error_rate_a:.0%} at c={r.level}" for r in failing)
    return f"{text}: {judgement}"


def compare(stats: Sequence[LevelStats], a: str, b: str) -> Comparison:
    """Compare targets `a` and `b` at every level both were measured at, in level order."""
    by_key = {(s.target, s.level): s for s in stats}
    levels = sorted({s.level for s in stats if s.target == a} & {s.level for s in stats if s.target == b})
    rows = tuple(compare_level(by_key[(a, level)], by_key[(b, level)]) for level in levels)
    return Comparison(a=a, b=b, levels=rows, verdict=verdict(a, b, rows))
