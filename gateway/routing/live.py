"""The live choice's scores (`sort: throughput`, `e2e`): the head of a ranking re-predicted per request
at each candidate's load as of now.

A ranking is rebuilt every 250 ms for one request shape, so its expected output and prompt are fixed
until then: each live candidate's curve is fixed to them when the ranking is built (`Fixed`), and a
request's prediction is then a few float operations per candidate. The arithmetic is
`Curve.predict`'s, in the same order, so the scores -- and the choices -- are the same to the bit; the
full `Prediction` is built only where one is used: the candidate chosen (its figures), and every live
candidate when one fails some attempts (`fallback_scores` prices the failures by their TTFT).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from math import inf
from typing import TYPE_CHECKING

from gateway.policy import Sort
from gateway.routing.curve import ERROR_PENALTY, TRIAL_CONCURRENCY, Curve, Prediction, fallback_scores

if TYPE_CHECKING:
    from gateway.routing.ranked import Ranked, Scored


class Fixed:
    """A curve fixed to one request's output (`n_tokens`) and uncached prompt tokens."""

    __slots__ = ("_base", "_extra", "_half", "_line", "_queue", "curve", "n_tokens", "uncached")

    def __init__(self, curve: Curve, n_tokens: int, uncached: int) -> None:
        self.curve = curve
        self.n_tokens = n_tokens
        self.uncached = uncached
        self._half = n_tokens / 2.0
        prefill = curve.prefill
        # TTFT as `Curve.ttft_s` computes it: a measured prefill line, else the load line plus the
        # advertised prefill of the uncached tokens. The parts that do not depend on load, computed once.
        self._base: float | None = None
        self._queue = 0.0
        self._line = curve.ttft
        self._extra: float | None = None
        if prefill is not None and prefill.per_token_s is not None:
            self._base = prefill.base_s + (prefill.per_token_s or 0.0) * uncached
            self._queue = prefill.queue_s
        elif curve.prefill_s_per_token is not None and uncached:
            self._extra = uncached * curve.prefill_s_per_token

    def clean_e2e(self, in_flight: int, trial: int | None, e2e: bool) -> tuple[float, float]:
        """(`clean_s`, `e2e_s`) of `Curve.predict(in_flight, n_tokens, trial, uncached)`; with `e2e`, the
        clean score is the request's own end-to-end time (as the router's `sort: e2e` scores it)."""
        tps = self.curve.tps
        if tps is None:
            return inf, inf
        if self._base is not None:
            ttft = self._base + self._queue * in_flight
        else:
            line = self._line
            ttft = 0.0 if line is None else line[0] + line[1] * (in_flight + 1)
            if self._extra is not None:
                ttft = ttft + self._extra
        load = in_flight + 1
        a, b = tps
        per_token = a + b * load
        decode = self.n_tokens * per_token
        e2e_s = ttft + decode
        curve = self.curve
        limit = curve.limit
        if (limit is not None and load > limit) or (curve.claimed and trial is not None and load > trial):
            return inf, e2e_s
        if e2e:
            return e2e_s * curve.penalty, e2e_s
        return (decode + in_flight * self._half * b) * curve.penalty, e2e_s

    def predict(self, in_flight: int, trial: int | None, e2e: bool) -> Prediction:
        """The full prediction `clean_e2e` summarises: `Curve.predict(in_flight, n_tokens, trial, uncached)`,
        its arithmetic in the same order, with the parts fixed to the request taken as computed once;
        with `e2e`, its clean score is the request's own end-to-end time."""
        curve = self.curve
        if self._base is not None:
            ttft: float | None = self._base + self._queue * in_flight
        else:
            line = self._line
            ttft = None if line is None else line[0] + line[1] * (in_flight + 1)
            if self._extra is not None:
                ttft = (ttft or 0.0) + self._extra
        load = in_flight + 1
        tps = curve.tps
        if tps is None:
            return Prediction(None, ttft, load, inf, 0.0, inf)
        a, b = tps
        per_token = a + b * load
        decode = self.n_tokens * per_token
        e2e_s = (ttft or 0.0) + decode
        marginal = in_flight * self._half * b
        limit = curve.limit
        if (limit is not None and load > limit) or (curve.claimed and trial is not None and load > trial):
            clean = inf
        elif e2e:  # this request's own end-to-end time, not its decode plus what it adds to others
            clean = e2e_s * curve.penalty
        else:
            clean = (decode + marginal) * curve.penalty
        score = clean * (1.0 + ERROR_PENALTY * curve.error_rate)
        return Prediction(1.0 / per_token, ttft, load, e2e_s, marginal, score, clean)


def trial_share(loads: list[int]) -> int:
    """What a never-measured endpoint may take now: a few, or an even split of the load with this request
    (curve.TRIAL_CONCURRENCY), until it has been measured."""
    return max(TRIAL_CONCURRENCY, -(-(sum(loads) + 1) // max(1, len(loads))))


def score_live(ranked: Ranked, in_flight_of: Callable[[Sequence[str]], list[int]],
               unavailable: Callable[[str], bool] | None) -> tuple[list[Scored], int]:
    """The live candidates scored at their load as of now (the ranking is up to 250 ms old), and the
    trial share they were scored with. (Plain loops by index: 4-8 candidates per request, and a
    comprehension or `zip(strict=)` costs a few tenths of a µs a call before its first item.)"""
    keys, fixed = ranked.live_keys, ranked.fixed
    n = len(keys)
    loads = in_flight_of(keys)  # (the store's `in_flight_of`: all at once)
    # The share a claim may take: nothing else reads it, so it is worked out only where one is live.
    trial = trial_share(loads) if ranked.claims else TRIAL_CONCURRENCY
    e2e = ranked.sort is _E2E
    if ranked.flaky:
        return _scored_flaky(ranked, loads, trial, e2e, unavailable), trial
    # An agent's next turn will be cheaper where this one builds its cache (stay.py): as the time a
    # candidate's cache would not save, so that scores stay positive (near ties).
    credits, most = ranked.credits, ranked.most_credit
    ranks, live = ranked.live_ranks, ranked.live
    scored: list[Scored] = []
    for i in range(n):  # all as cold prompts: the session's holder is judged apart (stay.py)
        clean, e2e_s = fixed[i].clean_e2e(loads[i], trial, e2e)
        if unavailable is not None and unavailable(keys[i]):
            clean = inf  # one dispatch would skip counts as full: not chosen, and last in the fallback order
        scored.append((clean + most - credits[i] if credits else clean, ranks[i], loads[i], e2e_s, live[i], i))
    return scored, trial


def _scored_flaky(ranked: Ranked, loads: list[int], trial: int, e2e: bool,
                  unavailable: Callable[[str], bool] | None) -> list[Scored]:
    """`score_live`'s scores where some live candidate fails some attempts: each priced by what it falls
    back to (`fallback_scores`, from every candidate's clean score), then credited as there."""
    keys, fixed = ranked.live_keys, ranked.fixed
    n = len(keys)
    scores: list[float] = []
    e2es: list[float] = []
    for i in range(n):
        clean, e2e_s = fixed[i].clean_e2e(loads[i], trial, e2e)
        if unavailable is not None and unavailable(keys[i]):
            clean = inf
        scores.append(clean)
        e2es.append(e2e_s)
    scores = fallback_scores(scores, [f.curve for f in fixed], [fixed[i].predict(loads[i], trial, e2e)
                                                                 for i in range(n)])
    credits, most = ranked.credits, ranked.most_credit
    ranks, live = ranked.live_ranks, ranked.live
    return [(scores[i] + most - credits[i] if credits else scores[i], ranks[i], loads[i], e2es[i], live[i], i)
            for i in range(n)]


_E2E = Sort.E2E  # (an enum member's attribute lookup costs 0.2 µs)


def predicted(ranked: Ranked, s: Scored, trial: int) -> Prediction:
    """The full prediction of a scored candidate (its figures, once chosen)."""
    return ranked.fixed[s[5]].predict(s[2], trial, ranked.sort is _E2E)
