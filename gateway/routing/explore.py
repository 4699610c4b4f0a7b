"""Exploration: now and then a request goes to an endpoint whose figures are old or only claimed,
so that a recovery, or a claim's truth, is noticed. What an exploration costs its user is weighed:
with `sort: e2e` only an endpoint that could win is tried (`best_case_s`).

State (when each stale endpoint was last explored, the re-checks of endpoints that slowed all at
once) is this replica's own and survives a reload (`Router.carry_over`)."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from math import inf
from typing import TYPE_CHECKING

from gateway.config import Endpoint
from gateway.context import Candidate
from gateway.routing.curve import Curve, curve
from gateway.routing.ranked import Ranked, Scored
from gateway.routing.recheck import Rechecks

if TYPE_CHECKING:
    from gateway.routing.router import RouterSettings


class Explorer:
    def __init__(self, settings: RouterSettings, in_flight: Callable[[str], int], rng: random.Random,
                 clock: Callable[[], float]) -> None:
        self.settings = settings
        self._in_flight = in_flight
        self._rng = rng
        self._clock = clock
        self.explored: dict[str, float] = {}  # endpoint key -> when a stale endpoint was last explored
        self.rechecks = Rechecks(settings.recheck)

    def carry_over(self, old: Explorer) -> None:
        self.explored = old.explored
        self.rechecks = old.rechecks

    def slowed(self, endpoint_key: str) -> None:
        """An endpoint slowed all at once: re-check it for a while (recheck.py)."""
        self.rechecks.slowed(endpoint_key, self._clock())

    def pick(self, ranked: Ranked, default: Candidate, scored: list[Scored] | None) -> Candidate | None:
        """A never-measured endpoint now and then; with `sort: throughput` a stale one (no sample for
        `stale_after_s`) once per `stale_after_s` for sure -- so a recovery is seen within about twice
        that, whatever the traffic -- and a stale one by chance (`explore_rate`). With `sort: e2e`
        (and agent-sized prompts without a sort) only a stale one that could win: its best case for
        this request -- as fast as it was ever measured or claims to be, alone -- beats the best now.
        The prompt's prefill is part of what an exploration costs its user: a 10k-token prompt sent
        to a GPU host at 4k tokens/s to learn whether it recovered cost ~3 s, 5x the turn elsewhere."""
        # One exploring request at a time: a slow endpoint being measured must not take half the traffic.
        cold = [c for c in ranked.cold if c is not default and not self._in_flight(c.endpoint.key)] \
            if ranked.cold else None
        if cold and self._rng.random() < self.settings.cold_explore_rate:
            return self._rng.choice(cold)
        if self.settings.explore_rate <= 0:
            return None
        now = self._clock()
        if ranked.live_choice:  # one that slowed all at once, re-checked for a while (recheck.py)
            recheck = self.rechecks.due(ranked.live, ranked.live_keys, self._in_flight, now)
            if recheck is not None:
                return recheck
        stale = ranked.stale
        if ranked.best_case and scored:
            best_now = inf  # the least predicted end-to-end time now, not a full one's
            for s in scored:
                if s[0] < inf and s[3] < best_now:
                    best_now = s[3]
            stale = tuple(c for c in stale if (b := ranked.best_case[c.endpoint.key]) <= best_now or b == inf)
        # The cached order's first too: the live choice may be another.
        explored = self._due_stale(stale, now) if ranked.live_choice and stale else None
        if explored is not None:
            return explored
        if self._rng.random() < self.settings.explore_rate:
            # Not one already being explored: its answer is the news; more requests meanwhile learn
            # nothing more (a false claim of 500 tok/s took 3-6 at ~3.5 s each while its first was out).
            chances = [c for c in stale if c is not default and not self._in_flight(c.endpoint.key)]
            if chances:
                return self._rng.choice(chances)
        return None

    def passed_over(self, ranked: Ranked) -> Candidate | None:
        """Without a sort: a premium endpoint spilled behind the next tier as slower (`ranked.slower`),
        re-checked as `pick` re-checks one with a sort -- one that slowed all at once at growing
        intervals for a while (recheck.py), then once per `stale_after_s` while it has no recent
        sample. Nothing else sends it a request: one sample slowed by a stall (the gateway's or the
        host's) kept a healthy fast tier passed over, unmeasured, for 13-48 s of a fault run."""
        if self.settings.explore_rate <= 0:
            return None
        slower = ranked.slower
        now = self._clock()
        recheck = self.rechecks.due(slower, [c.endpoint.key for c in slower], self._in_flight, now)
        if recheck is not None:
            return recheck
        stale_after = self.settings.stale_after_s
        return self._due_stale([c for c in slower if (age := ranked.stats[c.endpoint.key].age_s) is None
                                or age > stale_after], now)

    def _due_stale(self, stale: Iterable[Candidate], now: float) -> Candidate | None:
        """The first of `stale` not explored for `stale_after_s` and not being explored now (its answer
        is the news), marked explored now."""
        for c in stale:
            key = c.endpoint.key
            if now - self.explored.get(key, -1e18) >= self.settings.stale_after_s and not self._in_flight(key):
                self.explored[key] = now
                return c
        return None


def best_case_s(endpoint: Endpoint, measured: Curve, n_tokens: int, prompt_tokens: int) -> float:
    """The least end-to-end time an endpoint would take for this request alone, by its measured curve or
    by its catalogue claims, whichever promises more (inf: neither gives a decode rate, nothing known)."""
    claimed = curve(endpoint, None, None, None).predict(0, n_tokens, None, prompt_tokens)
    return min(measured.predict(0, n_tokens, None, prompt_tokens).e2e_s, claimed.e2e_s)
