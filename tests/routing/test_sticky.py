"""Stickiness as a trade-off: a turn stays on its cache holder while the cache saves more than the
holder's extra queueing costs, and moves otherwise (sticky.py, stay.py, the router)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from gateway.context import Preferences
from gateway.policy import Sort
from gateway.routing.figures import estimated_cost
from gateway.routing.router import Router, RouterSettings
from gateway.routing.stay import Warm, warm_figures
from gateway.routing.sticky import SessionAffinity, derived_session_key, stay_or_move
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import AttemptSample, Outcome
from tests.routing.helpers import catalogue, chat, endpoint, router

PRICE = {"input": 1.0, "cached_input": 0.1, "output": 2.0}
PREFILL_TPS = 4000.0


def test_stays_when_the_cache_saves_more_than_the_extra_time_and_moves_otherwise() -> None:
    # 40k cached tokens at 4000 tok/s: 10 s of prefill saved, against a holder 6 s slower.
    stays = stay_or_move(6.0, 40_000, 1 / PREFILL_TPS, 0.0, 0.0)
    assert stays.stay and stays.why == "stays: cache saves ~10.0 s prefill"
    moves = stay_or_move(6.0, 4_000, 1 / PREFILL_TPS, 0.0, 0.0)
    assert not moves.stay and moves.why.startswith("moves: holder ~6.0 s slower")
    assert stay_or_move(0.0, 0, 1 / PREFILL_TPS, 0.0, 0.0).stay  # equal goes to the holder
    # Money counts too, up to the prefill time saved again: 1 s saved, 90% of the bill, 1.8 s extra.
    assert stay_or_move(1.8, 4_000, 1 / PREFILL_TPS, 0.9, 0.0).stay
    assert not stay_or_move(1.8, 4_000, 1 / PREFILL_TPS, 0.0, 0.0).stay


def measured(r: Router, store: MemoryStore, key: str) -> None:
    """Samples of an endpoint that prefills 4000 tok/s after 0.2 s and decodes 100 tok/s per user,
    each extra request in flight slowing it by half."""
    for i in range(40):
        load = i % 9
        tokens = (1_000, 5_000, 20_000, 40_000)[i % 4]
        ttft = 0.2 + tokens / PREFILL_TPS
        sample = AttemptSample(key, time.time() - 1.0, Outcome.OK, 200, ttft, ttft, 100.0 / (1 + 0.5 * load),
                               1.0, input_tokens=tokens, output_tokens=200, in_flight_at_start=load,
                               in_flight_at_end=load)
        store.record(sample)
        r.observe(sample)


def agent_turn(session: str, prompt_tokens: int, previous: int, r: Router, holder: str) -> tuple[str, tuple[str, ...]]:
    r.sessions.remember(session, holder, previous)
    request = chat(session_id=session, max_tokens=200)._replace(prompt_chars=4 * prompt_tokens)
    c = r.plan(request, Preferences(sort=Sort.E2E)).candidates[0]
    return c.endpoint.id, c.notes


def test_a_busy_holder_keeps_a_long_session_but_not_a_short_one(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a", price=PRICE), endpoint("b", price=PRICE)])
    r, store = router(cat)
    for key in ("m/a/standard", "m/b/standard"):
        measured(r, store, key)
    for _ in range(8):  # the holder is busy: each of its users decodes at a fifth of the speed
        store.begin("m/a/standard")
    # 40k tokens cached: ~10 s of prefill saved outweighs ~9 s more of decode behind its queue.
    served, notes = agent_turn("long", 41_000, 40_000, r, "m/a/standard")
    assert served == "a/standard" and notes[0] == "sticky" and notes[1].startswith("stays: cache saves ~10.")
    # 4k tokens cached: ~1 s saved does not pay for ~9 s of queue.
    served, notes = agent_turn("short", 5_000, 4_000, r, "m/a/standard")
    assert served == "b/standard" and notes[-1].startswith("moves: holder ~")
    # Not busy: both stay (the cache saves time at no cost).
    for _ in range(8):
        store.end("m/a/standard")
    assert agent_turn("short", 5_000, 4_000, r, "m/a/standard")[0] == "a/standard"


def test_a_holder_that_fails_is_left(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a", price=PRICE), endpoint("b", price=PRICE)])
    r, _ = router(cat)
    r.sessions.remember("s", "m/a/standard", 40_000)
    request = chat(session_id="s")._replace(prompt_chars=4 * 41_000)
    assert r.plan(request, Preferences()).candidates[0].endpoint.id == "a/standard"
    excluded = Preferences(ignore=("a",))  # as when health keeps it out of the plan
    assert r.plan(request, excluded).candidates[0].endpoint.id == "b/standard"


def test_the_session_table_remembers_the_last_turns_input_and_expires() -> None:
    now = [0.0]
    table = SessionAffinity(idle_s=10.0, clock=lambda: now[0])
    table.remember("s", "m/a", 12_000)
    assert table.holder("s") is not None and table.holder("s").input_tokens == 12_000  # type: ignore[union-attr]
    now[0] = 11.0
    assert table.get("s") is None


def test_a_derived_session_key_hashes_only_the_start_of_the_first_messages() -> None:
    system = {"role": "system", "content": "tools " * 50_000}
    a = chat(messages=[system, {"role": "user", "content": "task 1"}, {"role": "assistant", "content": "x"}])
    b = chat(messages=[system, {"role": "user", "content": "task 1"}])
    c = chat(messages=[system, {"role": "user", "content": "task 2"}])
    assert derived_session_key(a) == derived_session_key(b) != derived_session_key(c)


@pytest.mark.parametrize("sort", [None, Sort.LATENCY, Sort.THROUGHPUT, Sort.E2E, Sort.PRICE])
def test_every_sort_keeps_an_idle_holder(tmp_path: Path, sort: Sort | None) -> None:
    cat = catalogue(tmp_path, [endpoint("a", price=PRICE), endpoint("b", price=PRICE)])
    r, store = router(cat)
    for key in ("m/a/standard", "m/b/standard"):
        measured(r, store, key)
    r.sessions.remember("s", "m/b/standard", 30_000)
    request = chat(session_id="s", max_tokens=100)._replace(prompt_chars=4 * 31_000)
    c = r.plan(request, Preferences(sort=sort)).candidates[0]
    assert c.endpoint.id == "b/standard" and c.notes[0] == "sticky", c.notes


def test_an_agent_prompt_goes_where_its_cache_will_serve_the_next_turn(tmp_path: Path) -> None:
    """Two hosts equally fast now; one caches prompts (a cached-input price), one does not: an
    agent-sized prompt goes to the one whose cache will make the session's next turn faster."""
    cat = catalogue(tmp_path, [endpoint("caches", price=PRICE), endpoint("cold", price={"input": 1.0, "output": 2.0})])
    r, store = router(cat)
    for key in ("m/caches/standard", "m/cold/standard"):
        measured(r, store, key)
    request = chat(max_tokens=200)._replace(prompt_chars=4 * 20_000)
    for sort in (None, Sort.E2E):
        assert {r.plan(request, Preferences(sort=sort)).candidates[0].endpoint.id for _ in range(30)} == \
            {"caches/standard"}


def test_a_turn_detoured_off_its_cache_holder_goes_back_to_that_cache(tmp_path: Path) -> None:
    """A session held on `a` (40k tokens cached) had one turn served by `b`, a host that caches nothing
    (its holder was full for a moment): the next turn goes back to `a`'s cache, busy as `a` is (a cold
    prompt there would be slower than on `b`), rather than judging `b` as where its prompt is."""
    cat = catalogue(tmp_path, [endpoint("a", price=PRICE), endpoint("b", price={"input": 1.0, "output": 2.0})])
    r, store = router(cat)
    for key in ("m/a/standard", "m/b/standard"):
        measured(r, store, key)
    for _ in range(16):  # a is busy: each of its users decodes at a ninth of the speed, ~19 s for this one
        store.begin("m/a/standard")
    r.sessions.remember("s", "m/a/standard", 40_000)
    r.sessions.remember("s", "m/b/standard", 41_000)
    assert [h.endpoint_key for h in r.sessions.holders("s")] == ["m/b/standard", "m/a/standard"]
    request = chat(session_id="s", max_tokens=200)._replace(prompt_chars=4 * 42_000)
    c = r.plan(request, Preferences(sort=Sort.E2E)).candidates[0]
    assert c.endpoint.id == "a/standard" and c.notes[0] == "sticky" and c.notes[1].startswith("stays: cache saves ~10.")


def test_a_holders_cache_is_valued_once_per_ranking_and_held_turn(tmp_path: Path) -> None:
    """What a holder's cache is worth (tokens held, the bill with them cached, the share saved) depends on
    the ranking's stats and the tokens the holder was sent: worked out for the first turn judged, kept
    with the ranking for the next ones (stay.py `warm_figures`)."""
    price = {"input": 1.0, "cached_input": 0.1, "output": 4.0}
    cat = catalogue(tmp_path, [endpoint("a", price=price), endpoint("b", price=price)])
    store = MemoryStore()
    r = Router(cat, store, RouterSettings(explore_rate=0.0, cold_explore_rate=0.0, ranking_ttl_s=60.0),
               rng=random.Random(1))
    e = cat.models["m"][0]
    stats = store.stats(e.key)
    cold = estimated_cost(e, 30_000, 100, stats)
    warm = estimated_cost(e, 30_000, 100, stats, 20_000)
    assert warm_figures(e, stats, 20_000, 30_000, 100) == Warm(20_000, warm, (cold - warm) / cold)
    assert warm_figures(e, stats, 50_000, 30_000, 100).cached == 30_000  # no more than the prompt
    r.sessions.remember("s1", e.key, 20_000)
    request = chat(session_id="s1", provider={"sort": "e2e"})
    prefs = Preferences(sort=Sort.E2E)
    first_plan = r.plan(request, prefs)
    (ranked,) = r._ranked.values()
    (key,) = ranked.warm
    assert key == (e.key, 20_000) and ranked.warm[key] == warm_figures(e, ranked.stats[e.key], 20_000,
                                                                        ranked.prompt_tokens, ranked.n_tokens)
    assert r.plan(request, prefs) == first_plan and len(ranked.warm) == 1
