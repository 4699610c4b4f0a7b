"""Percentiles of measured samples: pure functions, no I/O.

Does: linear-interpolation percentiles (numpy's default, "type 7"), tolerant of empty input.
Does not: know what the samples are (seconds, tokens per second) or drop outliers.
"""

from __future__ import annotations

from collections.abc import Iterable


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0 <= q <= 100) with linear interpolation between order statistics;
    None when there are no values (a level where every request failed has no TTFT)."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be within [0, 100], got {q}")
    ordered = sorted(values)
    if not ordered:
        return None
    # Interpolation rather than nearest-rank: with the few samples a short bench has (say 4), the
    # nearest rank jumps between samples, while interpolation moves smoothly with q.
    position = (len(ordered) - 1) * q / 100.0
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    fraction = position - low
    return ordered[low] + (ordered[high] - ordered[low]) * fraction
