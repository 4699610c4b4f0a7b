"""Re-checking an endpoint that slowed down all at once, so that its recovery is seen in seconds.

A sudden slow-down (speed.py: a sample `SURPRISE` times slower than the fit) takes an endpoint's
traffic away within a fraction of a second; from then on nothing measures it, and stale exploration
(router.py: once per `stale_after_s` after its last sample) would see a recovery only 10-20 s later.
A sudden slow-down is often a passing one (a neighbour's burst, a restart), so for `for_s` after it
the endpoint is sent one request `first_s` after it, then at doubling intervals (one at a time, with
sort: throughput), the way stale endpoints are explored: two or three requests at the slowed speed,
against a recovery seen within seconds. After `for_s`, stale exploration takes over.

Bookkeeping only: the router asks `due()` per request (nothing to do while nothing slowed down).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RecheckPolicy:
    first_s: float = 3.0  # one request to a slowed endpoint this long after the slow-down, then at
    backoff: float = 2.0  # ... intervals this many times longer each time (3, 6, 12 s) ...
    for_s: float = 20.0  # ... for this long after the slow-down: the time a recovery must be seen in


DEFAULT_RECHECK = RecheckPolicy()


class Rechecks:
    """Per endpoint key: when a slow-down was seen, and when the next re-check is due."""

    __slots__ = ("_due", "policy")

    def __init__(self, policy: RecheckPolicy | None = None) -> None:
        self.policy = policy or DEFAULT_RECHECK
        self._due: dict[str, tuple[float, float, float]] = {}  # key -> (next re-check, interval, slowed at)

    def slowed(self, key: str, now: float) -> None:
        self._due[key] = (now + self.policy.first_s, self.policy.first_s, now)

    def due(self, candidates: Sequence[T], keys: Sequence[str], busy: Callable[[str], int], now: float) -> T | None:
        """The first of `candidates` (their endpoint `keys`, in order) due for a re-check and not already in
        use (its answer is the news); its next one is scheduled. Endpoints past `for_s` are forgotten."""
        if self._due.keys().isdisjoint(keys):  # (most requests: none of theirs is being re-checked)
            return None
        for i, key in enumerate(keys):
            entry = self._due.get(key)
            if entry is None or now < entry[0] or busy(key):
                continue
            if now - entry[2] > self.policy.for_s:
                del self._due[key]
                continue
            interval = entry[1] * self.policy.backoff
            self._due[key] = (now + interval, interval, entry[2])
            return candidates[i]
        return None
