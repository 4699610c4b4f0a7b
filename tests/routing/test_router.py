"""The router on a MemoryStore with scripted samples: ordering, spills, thresholds, stickiness."""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from gateway.config import Catalogue, load_catalogue
from gateway.context import Fallback, Plan, Preferences
from gateway.errors import InvalidRequest, ModelNotFound, NoMatchingEndpoint
from gateway.policy import PercentileThreshold, Sort, Speed
from gateway.routing.router import Router, RouterSettings
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import AttemptSample, Outcome
from tests.routing.helpers import catalogue, chat, endpoint, feed, first, router


def three(tmp_path: Path):
    return catalogue(tmp_path, [
        endpoint("std", price={"input": 0.3, "output": 1.2}, advertised={"tokens_per_second": 150}),
        # The brochure says 600 tok/s; the measurements will say otherwise.
        endpoint("highspeed", "fast", price={"input": 0.6, "output": 2.4}, advertised={"tokens_per_second": 600}),
        endpoint("ultra", "ultrafast", price={"input": 2.4, "output": 9.6}, advertised={"tokens_per_second": 1000}),
    ])


def test_measured_beats_advertised_for_throughput(tmp_path: Path) -> None:
    r, store = router(three(tmp_path))
    nitro = Preferences(sort=Sort.THROUGHPUT)
    assert first(r, nitro) == "highspeed/fast"  # before any sample, the brochure is all we have
    feed(r, store, "m/std/standard", tps=150)
    feed(r, store, "m/highspeed/fast", tps=120)
    assert first(r, nitro) == "std/standard"
    plan = r.plan(chat(), nitro)
    assert "m/ultra/ultrafast" in {e.endpoint_key for e in plan.excluded}  # never unless asked for


def test_latency_and_price_sorts(tmp_path: Path) -> None:
    r, store = router(three(tmp_path))
    feed(r, store, "m/std/standard", tps=150, ttft_ms=900)
    feed(r, store, "m/highspeed/fast", tps=500, ttft_ms=200)
    assert first(r, Preferences(sort=Sort.LATENCY, speed=Speed.FAST)) == "highspeed/fast"
    assert first(r, Preferences(sort=Sort.PRICE, speed=Speed.ULTRAFAST)) == "ultra/ultrafast"  # tier first
    ranked = r.plan(chat(), Preferences(sort=Sort.PRICE, speed=Speed.ULTRAFAST)).endpoints
    assert [e.id for e in ranked] == ["ultra/ultrafast", "highspeed/fast", "std/standard"]
    assert first(r, Preferences(sort=Sort.THROUGHPUT, speed=Speed.STANDARD)) == "std/standard"


def test_premium_tier_that_is_slower_spills(tmp_path: Path) -> None:
    r, store = router(three(tmp_path))
    feed(r, store, "m/std/standard", tps=150)
    feed(r, store, "m/highspeed/fast", tps=120)
    plan = r.plan(chat(), Preferences(speed=Speed.FAST))
    assert [e.id for e in plan.endpoints] == ["std/standard", "highspeed/fast"]
    assert [(s.endpoint_id, s.reason) for s in plan.spills] == [("highspeed/fast", "slower")]
    feed(r, store, "m/highspeed/fast", tps=900, n=20)
    assert first(r, Preferences(speed=Speed.FAST)) == "highspeed/fast"


def test_premium_at_capacity_spills(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("std"), endpoint("fast", "fast", max_concurrency=2)])
    r, store = router(cat)
    store.begin("m/fast/fast")
    store.begin("m/fast/fast")
    plan = r.plan(chat(), Preferences(speed=Speed.FAST))
    assert plan.endpoints[0].id == "std/standard" and plan.spills[0].reason == "capacity"


def test_soft_threshold_moves_to_back_not_out(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a", price={"input": 0.1, "output": 0.1}), endpoint("b", id="b")])
    r, store = router(cat)
    feed(r, store, "m/a/standard", tps=80)
    feed(r, store, "m/b", tps=200)
    prefs = Preferences(sort=Sort.PRICE, min_throughput=PercentileThreshold(p50=100))
    plan = r.plan(chat(), prefs)
    assert [e.id for e in plan.endpoints] == ["b", "a/standard"]
    assert "below preferred_min_throughput" in plan.candidates[1].notes
    only_a = Preferences(sort=Sort.PRICE, min_throughput=PercentileThreshold(p50=100), only=("a",))
    assert first(r, only_a) == "a/standard"  # serves when nothing meets the threshold
    slow = Preferences(sort=Sort.PRICE, max_latency_s=PercentileThreshold(p90=0.1))
    assert len(r.plan(chat(), slow).endpoints) == 2


def test_order_goes_first(tmp_path: Path) -> None:
    r, _ = router(three(tmp_path))
    plan = r.plan(chat(), Preferences(speed=Speed.ULTRAFAST, order=("std", "highspeed/fast")))
    assert [e.id for e in plan.endpoints] == ["std/standard", "highspeed/fast", "ultra/ultrafast"]
    only_order = Preferences(speed=Speed.FAST, order=("highspeed",), allow_fallbacks=False)
    assert [e.id for e in r.plan(chat(), only_order).endpoints] == ["highspeed/fast"]


def test_no_matching_endpoint_lists_reasons(tmp_path: Path) -> None:
    r, _ = router(three(tmp_path))
    with pytest.raises(NoMatchingEndpoint) as info:
        r.plan(chat(), Preferences(regions=("eu",)))
    message = info.value.message
    assert "m/std/standard: region us not in ['eu']" in message
    assert "m/ultra/ultrafast: region us not in ['eu']" in message
    with pytest.raises(NoMatchingEndpoint, match="tier ultrafast not used for speed unset"):
        r.plan(chat(), Preferences(only=("ultra",)))
    with pytest.raises(ModelNotFound):
        r.plan(chat(model="nope"), Preferences())
    with pytest.raises(InvalidRequest) as bad:
        r.plan(chat()._replace(fallback_models=("nope",)), Preferences())
    assert bad.value.param == "models"


def test_default_spreads_toward_the_cheaper(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("cheap", price={"input": 1, "output": 1}),
                               endpoint("dear", price={"input": 3, "output": 3})])
    r, _ = router(cat)
    counts = Counter(first(r, Preferences()) for _ in range(2000))
    assert 0.70 < counts["cheap/standard"] / 2000 < 0.80  # weights 1/1 : 1/3 -> 75%


def test_load_awareness_spreads_near_equal_endpoints(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a"), endpoint("b", id="b")])
    r, store = router(cat)
    for n in (0, 10, 20, 30):
        feed(r, store, "m/a/standard", tps=300 / (1 + 0.03 * n), in_flight=n, n=2)
        feed(r, store, "m/b", tps=260 / (1 + 0.03 * n), in_flight=n, n=2)
    chosen = []
    for _ in range(40):
        endpoint_id = first(r, Preferences(sort=Sort.THROUGHPUT))
        chosen.append(endpoint_id)
        store.begin("m/a/standard" if endpoint_id == "a/standard" else "m/b")
    counts = Counter(chosen)
    assert counts["b"] >= 10 and counts["a/standard"] >= counts["b"]  # the faster takes more, not all


def test_a_burst_is_not_piled_onto_an_endpoint_known_only_by_its_claims(tmp_path: Path) -> None:
    # Nothing measured yet; "claims" advertises five times the others' speed. The first burst is
    # spread (each unmeasured endpoint takes an even share), not sent wholly to the claim.
    cat = catalogue(tmp_path, [endpoint("claims", advertised={"tokens_per_second": 500}),
                               endpoint("b", advertised={"tokens_per_second": 100}),
                               endpoint("c", advertised={"tokens_per_second": 100})])
    r, store = router(cat)
    chosen = []
    for _ in range(24):
        endpoint_id = first(r, Preferences(sort=Sort.THROUGHPUT))
        chosen.append(endpoint_id)
        store.begin(f"m/{endpoint_id}")
    assert Counter(chosen)["claims/standard"] <= 8, Counter(chosen)
    # Once measured, the speed it really has decides, not the trial share.
    feed(r, store, "m/claims/standard", tps=500, n=3)
    assert first(r, Preferences(sort=Sort.THROUGHPUT)) == "claims/standard"


def test_fallback_after_the_choice_is_by_score_now_with_a_claim_at_its_trial_share_last(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("x", advertised={"tokens_per_second": 100}),
                               endpoint("claims", advertised={"tokens_per_second": 500}),
                               endpoint("y", advertised={"tokens_per_second": 100})])
    r, store = router(cat)
    feed(r, store, "m/x/standard", tps=200)
    feed(r, store, "m/y/standard", tps=150)
    for _ in range(5):
        store.begin("m/claims/standard")  # never measured, and already holding more than a trial share
    plan = r.plan(chat(), Preferences(sort=Sort.THROUGHPUT))
    assert [c.endpoint.id for c in plan.candidates] == ["x/standard", "y/standard", "claims/standard"]


def test_fallback_is_by_score_across_tiers(tmp_path: Path) -> None:
    # The fast tier's claim is false: measured slower than the standard one, it falls back after it.
    r, store = router(three(tmp_path))
    feed(r, store, "m/std/standard", tps=150)
    feed(r, store, "m/highspeed/fast", tps=60)
    feed(r, store, "m/ultra/ultrafast", tps=900)
    plan = r.plan(chat(), Preferences(sort=Sort.THROUGHPUT, speed=Speed.ULTRAFAST))
    assert [c.endpoint.id for c in plan.candidates] == ["ultra/ultrafast", "std/standard", "highspeed/fast"]


def test_an_endpoint_health_keeps_out_is_not_chosen_and_falls_back_last(tmp_path: Path) -> None:
    # A 429's cool-down: dispatch would skip it, so the choice is the best of the others, not
    # whichever comes next in a fallback order made for it.
    cat = three(tmp_path)
    cooling = {"m/ultra/ultrafast"}
    r, store = router(cat)
    r.unavailable = cooling.__contains__
    feed(r, store, "m/std/standard", tps=150)
    feed(r, store, "m/highspeed/fast", tps=60)
    feed(r, store, "m/ultra/ultrafast", tps=900)
    plan = r.plan(chat(), Preferences(sort=Sort.THROUGHPUT, speed=Speed.ULTRAFAST))
    assert [c.endpoint.id for c in plan.candidates] == ["std/standard", "highspeed/fast", "ultra/ultrafast"]
    cooling.clear()  # the cool-down is over
    assert first(r, Preferences(sort=Sort.THROUGHPUT, speed=Speed.ULTRAFAST)) == "ultra/ultrafast"


def test_sticky_sessions(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a", price={"input": 1, "cached_input": 0.1, "output": 1}),
                               endpoint("b", price={"input": 1, "cached_input": 0.1, "output": 1})])
    r, store = router(cat)
    request = chat(session_id="conv-1")
    plan = r.plan(request, Preferences())
    served = plan.endpoints[0].key
    feed(r, store, served, tps=100, n=1)
    r.observe(AttemptSample(served, 0.0, Outcome.OK, 200, 0.1, 0.1, 100.0, 1.0), plan.session_key)
    assert plan.session_key == "conv-1"
    assert all(r.plan(request, Preferences()).endpoints[0].key == served for _ in range(50))
    assert r.plan(request, Preferences()).candidates[0].notes[0] == "sticky"
    other = chat(session_id="conv-2")
    assert {r.plan(other, Preferences()).endpoints[0].key for _ in range(50)} == {"m/a/standard", "m/b/standard"}


def test_only_naming_an_endpoint_admits_its_tier(tmp_path: Path) -> None:
    r, _ = router(three(tmp_path))
    assert first(r, Preferences(only=("ultra/ultrafast",))) == "ultra/ultrafast"
    with pytest.raises(NoMatchingEndpoint):
        r.plan(chat(), Preferences(only=("ultra",)))  # a provider name is a filter, not a request for a tier


def test_a_stream_that_shows_a_slow_down_turns_the_next_requests_away_at_once(tmp_path: Path) -> None:
    # Rankings cached for a minute: the news must not wait for them, nor for the stream's end.
    cat = catalogue(tmp_path, [endpoint("a"), endpoint("b", id="b")])
    store = MemoryStore()
    r = Router(cat, store, RouterSettings(explore_rate=0.0, cold_explore_rate=0.0, ranking_ttl_s=60.0))
    feed(r, store, "m/a/standard", tps=300, n=8)
    feed(r, store, "m/b", tps=150, n=8)
    prefs = Preferences(sort=Sort.THROUGHPUT)
    assert first(r, prefs) == "a/standard"
    r.progress("m/a/standard", 0.0, 290.0, sent_at=time.time())  # as expected: nothing changes
    assert first(r, prefs) == "a/standard"
    r.progress("m/a/standard", 0.0, 100.0, sent_at=time.time())  # a stream sent now decodes at a third
    assert first(r, prefs) == "b"


def test_a_stale_endpoint_being_explored_is_not_explored_again_meanwhile(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a"), endpoint("b", id="b")])
    r, store = router(cat, explore_rate=1.0)  # every request would explore a stale endpoint by chance
    feed(r, store, "m/a/standard", tps=300, n=8)
    long_ago = time.time() - 60
    for _ in range(5):  # b: slow, and not seen for a minute
        sample = AttemptSample(endpoint_key="m/b", started_at=long_ago, outcome=Outcome.OK, status=200,
                               ttft_s=0.5, ttfat_s=0.5, decode_tps=60.0, e2e_s=3.0, output_tokens=100)
        store.record(sample)
        r.observe(sample)
    prefs = Preferences(sort=Sort.THROUGHPUT)
    assert first(r, prefs) == "b"  # explored: stale
    store.begin("m/b")
    # While that one is out, its answer is the news: the rest go by speed.
    assert Counter(first(r, prefs) for _ in range(20)) == {"a/standard": 20}


@pytest.mark.parametrize(("claim", "explored"), [(None, False), (2000, True)])
def test_e2e_explores_a_stale_endpoint_only_if_it_could_beat_the_best_now(tmp_path: Path, claim: int | None,
                                                                          explored: bool) -> None:
    # b: not seen for a minute, measured at a fifth of a's speed; it is worth a user's request only if
    # its best case (as measured, or as it claims) would beat a.
    advertised = {} if claim is None else {"advertised": {"tokens_per_second": claim, "ttft_ms": 100}}
    cat = catalogue(tmp_path, [endpoint("a"), endpoint("b", id="b", **advertised)])
    store = MemoryStore()  # stale endpoints explored once per stale_after_s, none by chance
    r = Router(cat, store, RouterSettings(explore_rate=1e-9, cold_explore_rate=0.0, ranking_ttl_s=0.0))
    feed(r, store, "m/a/standard", tps=300, n=8)
    long_ago = time.time() - 60
    for _ in range(5):
        sample = AttemptSample(endpoint_key="m/b", started_at=long_ago, outcome=Outcome.OK, status=200,
                               ttft_s=0.5, ttfat_s=0.5, decode_tps=60.0, e2e_s=3.0, output_tokens=100)
        store.record(sample)
        r.observe(sample)
    picks = Counter(first(r, Preferences(sort=Sort.E2E)) for _ in range(20))
    assert picks == ({"a/standard": 19, "b": 1} if explored else {"a/standard": 20})
    if not explored:  # throughput explores it all the same (the prompt is not part of its cost there)
        assert first(r, Preferences(sort=Sort.THROUGHPUT)) == "b"


def _clocked(cat: Catalogue, prefs: Preferences, stale_after_s: float
             ) -> tuple[Router, MemoryStore, Callable[..., Counter[str]]]:
    """A router on a clock the test sets (5% exploration, none of never-measured endpoints), its store,
    and `picks(at, n=20)`: the first candidates of `n` plans for `prefs` made at time `at`."""
    store, now = MemoryStore(), [0.0]
    settings = RouterSettings(explore_rate=0.05, cold_explore_rate=0.0, ranking_ttl_s=0.0,
                              stale_after_s=stale_after_s)
    r = Router(cat, store, settings, rng=random.Random(1), clock=lambda: now[0])

    def picks(at: float, n: int = 20) -> Counter[str]:
        now[0] = at
        return Counter(first(r, prefs) for _ in range(n))

    return r, store, picks


def test_an_endpoint_that_slowed_all_at_once_is_rechecked_at_growing_intervals_for_a_while(tmp_path: Path) -> None:
    r, store, picks = _clocked(catalogue(tmp_path, [endpoint("a"), endpoint("b", id="b")]),
                               Preferences(sort=Sort.THROUGHPUT), stale_after_s=1e9)
    feed(r, store, "m/a/standard", tps=300, n=8)
    feed(r, store, "m/b", tps=150, n=8)
    r.progress("m/a/standard", 0.0, 80.0, sent_at=time.time())  # slowed to a quarter
    first_s, lasts = r.settings.recheck.first_s, r.settings.recheck.for_s
    second_s = first_s * (1 + r.settings.recheck.backoff)

    assert picks(0.1) == {"b": 20}
    assert picks(first_s + 0.1) == {"a/standard": 1, "b": 19}  # one re-check: has it recovered?
    assert picks(2 * first_s + 0.2) == {"b": 20}  # the next one later (backoff)
    store.begin("m/a/standard")
    assert picks(second_s + 0.2) == {"b": 20}  # not while one is out: its answer is the news
    store.end("m/a/standard")
    assert picks(second_s + 0.3) == {"a/standard": 1, "b": 19}
    assert picks(lasts + 1)["a/standard"] == 0  # after a while, left to stale exploration


def test_without_a_sort_a_fast_tier_passed_over_as_slower_is_rechecked_and_wins_back_its_traffic(
        tmp_path: Path) -> None:
    # `speed: fast` without a sort: nothing explores, yet a fast tier predicted slower than standard is
    # spilled behind it. One slow sample (a stall) must not keep it there unmeasured (seen: 13-48 s).
    fast = Preferences(speed=Speed.FAST)
    r, store, picks = _clocked(catalogue(tmp_path, [endpoint("std"), endpoint("quick", "fast")]), fast,
                               stale_after_s=10.0)
    feed(r, store, "m/std/standard", tps=300, n=8)
    feed(r, store, "m/quick/fast", tps=600, n=8)

    assert picks(0.0) == {"quick/fast": 20}
    r.progress("m/quick/fast", 0.0, 150.0, sent_at=time.time())  # one stream, stalled: "a quarter"
    assert picks(0.1) == {"std/standard": 20}
    assert [(s.endpoint_id, s.reason) for s in r.plan(chat(), fast).spills] == [("quick/fast", "slower")]
    first_s = r.settings.recheck.first_s
    assert picks(first_s + 0.1) == {"quick/fast": 1, "std/standard": 19}  # re-checked once ...
    assert picks(first_s + 0.2) == {"std/standard": 20}  # ... and not again meanwhile
    sample = AttemptSample(endpoint_key="m/quick/fast", started_at=time.time(), outcome=Outcome.OK, status=200,
                           ttft_s=0.5, ttfat_s=0.5, decode_tps=600.0, e2e_s=1.0, output_tokens=100)
    store.record(sample)
    r.observe(sample)  # the re-check's answer: as fast as ever
    assert picks(first_s + 0.3) == {"quick/fast": 20}


def test_without_a_sort_a_stale_fast_tier_passed_over_as_slower_is_tried_once_per_stale_after_s(
        tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("std"), endpoint("quick", "fast")])
    store = MemoryStore()
    settings = RouterSettings(explore_rate=0.05, cold_explore_rate=0.0, ranking_ttl_s=0.0, stale_after_s=10.0)
    r = Router(cat, store, settings, rng=random.Random(1))
    feed(r, store, "m/std/standard", tps=300, n=8)
    long_ago = time.time() - 60
    for _ in range(5):  # quick: slower than standard, and not seen for a minute
        sample = AttemptSample(endpoint_key="m/quick/fast", started_at=long_ago, outcome=Outcome.OK, status=200,
                               ttft_s=0.5, ttfat_s=0.5, decode_tps=100.0, e2e_s=3.0, output_tokens=100)
        store.record(sample)
        r.observe(sample)
    picks = Counter(first(r, Preferences(speed=Speed.FAST)) for _ in range(20))
    assert picks == {"quick/fast": 1, "std/standard": 19}
    plan = r.plan(chat(), Preferences(speed=Speed.FAST))
    assert plan.candidates[0].endpoint.id == "std/standard"  # once per stale_after_s, not per request


def test_a_fallbacks_entry_ranks_its_model_for_its_own_speed_and_request(tmp_path: Path) -> None:
    path = tmp_path / "two.yaml"  # m, and a fallback model f: standard, and a fast tier of 10 output tokens at most
    path.write_text(yaml.safe_dump({
        "providers": {p: {"base_url": f"http://{p}.test/v1"} for p in ("a", "std", "quick")},
        "models": {"m": {"endpoints": [endpoint("a")]},
                   "f": {"aliases": ["eff"],
                         "endpoints": [endpoint("std"), endpoint("quick", "fast", max_output_tokens=10)]}}}))
    cat = load_catalogue(path, env={})[0]
    r, _ = router(cat)
    asked = chat(max_tokens=100)._replace(fallback_models=("eff",))

    def plan(*entries: Fallback, prefs: Preferences | None = None) -> tuple[list[str], Plan]:
        p = r.plan(asked._replace(fallbacks=entries), prefs or Preferences())
        return [e.id for e in p.endpoints], p

    assert plan()[0] == ["a/standard", "std/standard"]  # the request's own speed: standard
    # `speed: fast` for f only (m has no fast tier): fast first -- but max_tokens 100 is more than it gives.
    assert plan(Fallback("eff", Speed.FAST))[0] == ["a/standard", "std/standard"]
    short = asked._replace(body={**asked.body, "max_tokens": 7})
    ids, planned = plan(Fallback("eff", Speed.FAST, short))
    assert ids == ["a/standard", "quick/fast", "std/standard"]  # its own max_tokens: the fast tier fits
    assert planned.model_requests == {"f": short}  # by the model's name, not the alias
    a, quick, _ = planned.endpoints
    assert planned.request_for(asked, quick) is short and planned.request_for(asked, a) is asked
    # `speed: standard` for f while the request asks fast: f's fast tier is out, m's order is the request's.
    ids, planned = plan(Fallback("eff", Speed.STANDARD, short), prefs=Preferences(speed=Speed.FAST))
    assert ids == ["a/standard", "std/standard"] and "f/quick/fast" in {e.endpoint_key for e in planned.excluded}
    # The model asked for is served as asked, even when an entry names it too.
    assert plan(Fallback("m", Speed.FAST, short))[1].model_requests is None


async def test_a_ranking_in_use_is_rebuilt_between_requests_before_it_expires(tmp_path: Path) -> None:
    """A ranking read past half its TTL is rebuilt by a timer just before it expires, so the request that
    comes once the TTL has run out finds a fresh one and does not pay for the rebuild before its
    upstream is called (issue 32 item 11: 1 request in 4-5 did, at 20 paced requests/s)."""
    now = [100.0]
    r = Router(three(tmp_path), MemoryStore(), RouterSettings(explore_rate=0.0, cold_explore_rate=0.0,
                                                              ranking_ttl_s=0.04),
               rng=random.Random(1), clock=lambda: now[0])
    built: list[float] = []
    build = r._ranked_part

    def counted(key, static, at):  # type: ignore[no-untyped-def]
        built.append(at)
        return build(key, static, at)

    r._ranked_part = counted  # type: ignore[method-assign]
    prefs = Preferences(sort=Sort.THROUGHPUT)
    r.plan(chat(), prefs)
    assert built == [100.0]  # the first request builds it: there is nothing to serve
    now[0] += 0.01
    r.plan(chat(), prefs)
    await asyncio.sleep(0.1)
    assert built == [100.0]  # young: nothing scheduled
    now[0] += 0.02  # past half the TTL
    r.plan(chat(), prefs)
    r.plan(chat(), prefs)
    assert built == [100.0]  # nothing built on the requests' path...
    await asyncio.sleep(0.1)  # ...the timer (due in 6 ms) has run, once
    assert built == [100.0, 100.03]
    now[0] += 0.02  # the first ranking would have expired now
    r.plan(chat(), prefs)
    assert built == [100.0, 100.03]  # served the one the timer built


async def test_a_ranking_dropped_meanwhile_is_not_rebuilt_by_its_timer(tmp_path: Path) -> None:
    now = [100.0]
    r = Router(three(tmp_path), MemoryStore(), RouterSettings(ranking_ttl_s=0.04), rng=random.Random(1),
               clock=lambda: now[0])
    r.plan(chat(), Preferences(sort=Sort.THROUGHPUT))
    now[0] += 0.03
    r.plan(chat(), Preferences(sort=Sort.THROUGHPUT))  # schedules the rebuild
    r._ranked.clear()  # as a first measurement or a slow-down does
    await asyncio.sleep(0.1)
    assert r._ranked == {}  # nobody asked since: not rebuilt


def test_a_ttft_read_through_a_stall_of_the_gateways_loop_is_not_learned(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("a")])
    r, _ = router(cat)
    key = cat.models["m"][0].key
    sample = AttemptSample(key, time.time(), Outcome.OK, 200, ttft_s=0.4, ttfat_s=0.4, decode_tps=100.0, e2e_s=1.4,
                           output_tokens=100)
    r.observe(sample)
    r.observe(replace(sample, ttft_s=2.4, ttfat_s=2.4, e2e_s=3.4, loop_lag_s=2.0, ttft_lag_s=2.0))
    model = r._speed[key]
    assert model.ttft.sy / model.ttft.w == pytest.approx(0.4)  # the late first token left out
    assert model.tps.w > 1.5  # its decode, measured after the stall, counts
