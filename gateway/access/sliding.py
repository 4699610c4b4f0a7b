"""A true sliding minute: what was counted in the last 60 seconds, in one-second buckets.

`SlidingMinute` keeps a ring of 61 one-second buckets -- the current second and the 60 before it,
every second that overlaps the last 60 s -- and their running total. A bucket counts until its whole
second has left the window, so the total never misses anything of the last 60 s (it may still hold
up to one second more): a limit checked against it admits at most N in any 60-second window.
Adding and reading are O(1) amortised (each bucket is cleared once as the ring turns); memory is
61 floats per counter, whatever the traffic.
"""

from __future__ import annotations

SLOTS = 61  # the current second and the 60 before it


class SlidingMinute:
    __slots__ = ("_counts", "_second", "_total")

    def __init__(self) -> None:
        self._counts = [0.0] * SLOTS
        self._second = 0  # the newest second the ring has turned to
        self._total = 0.0

    def _turn(self, second: int) -> None:
        """Move the ring on to `second`, clearing the buckets that left the window."""
        if second <= self._second:
            return
        if second - self._second >= SLOTS:
            self._counts = [0.0] * SLOTS
            self._total = 0.0
        else:
            counts = self._counts
            for s in range(self._second + 1, second + 1):
                i = s % SLOTS
                self._total -= counts[i]
                counts[i] = 0.0
        self._second = second

    def add(self, now: float, amount: float) -> None:
        """Count `amount` at `now` (seconds since the epoch); a time already out of the window is ignored."""
        second = int(now)
        if second > self._second:  # (tested here: counted and read twice a request, most in the same second)
            self._turn(second)
        elif second <= self._second - SLOTS:
            return
        self._counts[second % SLOTS] += amount
        self._total += amount

    def count(self, now: float) -> float:
        """What was counted in the buckets overlapping (now - 60 s, now]."""
        second = int(now)
        if second > self._second:
            self._turn(second)
        total = self._total
        return total if total > 0.0 else 0.0  # never below zero through float rounding

    def seconds_until(self, target: float, now: float) -> float:
        """How long until `count` falls to `target` or below, if nothing more is counted: bucket `b`
        leaves the window when second `b + 61` begins."""
        total = self.count(now)
        if total <= target:
            return 0.0
        newest = self._second
        for b in range(newest - SLOTS + 1, newest + 1):  # oldest first
            total -= self._counts[b % SLOTS]
            if total <= target:
                return max(0.0, b + SLOTS - now)
        return float(SLOTS)  # only the float rounding of an empty ring gets here
