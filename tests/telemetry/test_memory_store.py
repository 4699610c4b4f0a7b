"""MemoryStore: in-flight counting, the stats cache, the fast EWMA, bounded state, the factory."""

from __future__ import annotations

import asyncio
import math

import orjson
import pytest

from gateway.telemetry import MemoryStore, RedisStore, TelemetryStore, make_store
from gateway.telemetry.sample import AttemptSample, Outcome

from .conftest import FakeClock, SampleFactory

KEY = "model/ep1"


def test_begin_end_in_flight() -> None:
    store = MemoryStore()
    assert store.in_flight(KEY) == 0
    assert store.begin(KEY) == 0
    assert store.begin(KEY) == 1
    assert store.begin(KEY) == 2
    assert store.in_flight(KEY) == 3
    store.end(KEY)
    assert store.in_flight(KEY) == 2
    store.end(KEY)
    store.end(KEY)
    store.end(KEY)  # unbalanced end never goes negative
    assert store.in_flight(KEY) == 0
    store.end("never/seen")
    assert store.in_flight("never/seen") == 0


def test_stats_are_cached_then_refreshed(clock: FakeClock, make_sample: SampleFactory) -> None:
    store = MemoryStore(clock=clock, cache_ttl_s=0.2)
    store.record(make_sample(at=clock.now))
    first = store.stats(KEY, 300)
    assert first.requests == 1
    for _ in range(5):
        store.record(make_sample(at=clock.now))
    clock.advance(0.1)
    assert store.stats(KEY, 300) is first  # within the TTL: the cached object
    assert store.stats(KEY, 60).requests == 6  # another window has its own entry
    clock.advance(0.15)
    refreshed = store.stats(KEY, 300)
    assert refreshed is not first and refreshed.requests == 6


async def test_stats_are_refreshed_between_requests_before_they_expire(clock: FakeClock,
                                                                       make_sample: SampleFactory) -> None:
    """A view asked for past half its TTL is recomputed by a timer before it expires, so the request that
    comes once the TTL has run out finds a view and does not pay for the recompute before its first
    token (issue 32 item 11)."""
    store = MemoryStore(clock=clock, cache_ttl_s=0.04)  # the timer is a real one: due 36 ms after the view
    store.record(make_sample(at=clock.now))
    first = store.stats(KEY, 300)
    computed: list[float] = []
    compute = store._compute

    def counted(key: str, now: float, window_s: float):  # type: ignore[no-untyped-def]
        computed.append(now)
        return compute(key, now, window_s)

    store._compute = counted  # type: ignore[method-assign]
    store.record(make_sample(at=clock.now))
    clock.advance(0.01)
    assert store.stats(KEY, 300) is first  # young: served, nothing scheduled
    await asyncio.sleep(0.1)
    assert computed == []
    clock.advance(0.02)  # past half the TTL
    assert store.stats(KEY, 300) is first and store.stats(KEY, 300) is first  # still served as it is...
    assert computed == []  # ...nothing computed on the caller's path
    await asyncio.sleep(0.1)  # the timer (due in 6 ms) has run
    assert computed == [clock.now]  # recomputed once, however many asked
    clock.advance(0.02)  # the first view would have expired now
    refreshed = store.stats(KEY, 300)
    assert refreshed is not first and refreshed.requests == 2
    assert len(computed) == 1  # the view made between the requests, not one made on this call's path


def test_fresh_stats_count_what_was_just_recorded(clock: FakeClock, make_sample: SampleFactory) -> None:
    """A decision on a failure path (is a 503 sporadic?) must see the attempts just recorded."""
    store = MemoryStore(clock=clock, cache_ttl_s=0.2)
    store.record(make_sample(at=clock.now))
    assert store.stats(KEY, 300).requests == 1
    store.record(make_sample(at=clock.now))
    assert store.stats(KEY, 300).requests == 1  # the cached view
    assert store.stats(KEY, 300, fresh=True).requests == 2
    assert store.stats(KEY, 300).requests == 2  # and the view is now that one


def test_ewma_reacts_within_a_few_samples(clock: FakeClock, make_sample: SampleFactory) -> None:
    store = MemoryStore(clock=clock)
    for _ in range(200):
        store.record(make_sample(at=clock.now, ttft_ms=400.0, decode_tps=1000.0))
        clock.advance(0.05)
    steady = store.stats(KEY, 300)
    assert steady.ewma_ttft_ms == pytest.approx(400.0)
    # sudden slowdown: 10x TTFT, a third of the speed
    for _ in range(3):
        store.record(make_sample(at=clock.now, ttft_ms=4000.0, decode_tps=300.0))
    st = store.stats(KEY, 300)  # same instant: a big EWMA move invalidates the cache at once
    assert st is not steady
    assert st.ewma_ttft_ms is not None and st.ewma_ttft_ms > 2500.0
    assert st.ewma_decode_tps is not None and st.ewma_decode_tps < 600.0
    assert st.ttft_ms is not None and st.ttft_ms.p50 < 450.0  # the window quantiles barely move


def test_a_jittery_endpoint_does_not_recompute_its_windows_on_every_request(
        clock: FakeClock, make_sample: SampleFactory) -> None:
    # A jump of the EWMA shows at once, but only the EWMAs are refreshed: the windows' quantiles and
    # fits are recomputed at the cache TTL, not on every sample that moves the EWMA by a quarter.
    store = MemoryStore(clock=clock)
    store.record(make_sample(at=clock.now, ttft_ms=100.0))
    first = store.stats(KEY, 300)
    for ttft_ms in (10_000.0, 100.0, 10_000.0, 100.0):  # each moves the EWMA by more than a quarter
        store.record(make_sample(at=clock.now, ttft_ms=ttft_ms))
        clock.advance(0.01)
        st = store.stats(KEY, 300)
        assert st.ttft_ms is first.ttft_ms and st.requests == first.requests == 1
        assert st.ewma_ttft_ms == store._local[KEY].ewma_ttft.value


def test_timeout_without_first_token_raises_ttft_ewma(clock: FakeClock, make_sample: SampleFactory) -> None:
    store = MemoryStore(clock=clock)
    for _ in range(10):
        store.record(make_sample(at=clock.now, ttft_ms=300.0))
    for _ in range(3):
        store.record(make_sample(at=clock.now, outcome=Outcome.TIMEOUT, ttft_ms=None, decode_tps=None,
                                 e2e_ms=10_000.0))
    st = store.stats(KEY)
    assert st.ewma_ttft_ms is not None and st.ewma_ttft_ms > 5000.0
    assert st.timeout_rate == pytest.approx(3 / 13)


def test_stats_for_unknown_endpoint() -> None:
    st = MemoryStore().stats("nobody/home", 60)
    assert (st.requests, st.age_s, st.ttft_ms, st.ewma_ttft_ms) == (0, None, None, None)


def test_idle_endpoints_are_dropped(clock: FakeClock, make_sample: SampleFactory) -> None:
    store = MemoryStore(clock=clock)
    for i in range(50):
        store.record(make_sample(f"m/e{i}", at=clock.now))
    store.begin("m/busy")
    assert len(store.keys()) == 51
    clock.advance(1800 + 60)
    store.record(make_sample("m/e0", at=clock.now))
    assert store.keys() == ["m/busy", "m/e0"]  # in-flight keeps an endpoint known
    w = store.windows("m/e0")
    assert w is not None and len(w) == 1


def test_record_never_raises_and_ignores_bad_values(clock: FakeClock) -> None:
    store = MemoryStore(clock=clock)
    weird = AttemptSample(endpoint_key=KEY, started_at=clock.now, outcome=Outcome.OK, status=200,
                          ttft_s=math.nan, ttfat_s=-1.0, decode_tps=math.inf, e2e_s=0.0)
    store.record(weird)
    store.record(None)  # type: ignore[arg-type]  # a bug in the caller must not break a request
    st = store.stats(KEY, 60)
    assert st.requests == 1


def test_to_json_shape(clock: FakeClock, make_sample: SampleFactory) -> None:
    store = MemoryStore(clock=clock)
    store.begin(KEY)
    for i in range(20):
        store.record(make_sample(at=clock.now - 0.4, ttft_ms=300.0 + i * 10))
    doc = store.stats(KEY, 300).to_json()
    assert orjson.loads(orjson.dumps(doc)) == doc
    assert doc["window_s"] == 300 and isinstance(doc["window_s"], int)
    assert doc["requests"] == 20 and doc["in_flight"] == 1 and doc["age_s"] == pytest.approx(0.4)
    assert set(doc["ttft_ms"]) >= {"p25", "p50", "p75", "p90", "p95", "p99"}
    assert doc["ttfat_ms"] is not None and doc["decode_tps"]["p50"] == pytest.approx(900, rel=0.01)
    assert set(doc["ewma"]) == {"ttft_ms", "decode_tps"}
    assert doc["tokens"] == {"input": 2000, "cached_input": 0, "cache_write_input": 0, "output": 1000, "reasoning": 0}
    assert doc["cost_usd"] == pytest.approx(0.02)
    for k in ("error_rate", "rate_limited_rate", "timeout_rate"):
        assert doc[k] == 0.0


def test_in_flight_of_reads_each_key_as_in_flight_does() -> None:
    """The live choice reads its candidates' counts at once (`in_flight_of`): the same numbers as one
    `in_flight` call per key, this replica's and (Redis) the other replicas' last known counts."""
    mem = MemoryStore()
    for key, n in (("m/a", 2), ("m/b", 1), ("m/c", 3)):
        for _ in range(n):
            mem.begin(key)
    mem.end("m/c")
    keys = ("m/b", "m/a", "never/seen", "m/c")
    assert mem.in_flight_of(keys) == [mem.in_flight(k) for k in keys] == [1, 2, 0, 2]
    red = make_store("redis://127.0.0.1:1/0", replica_id="r1")
    assert isinstance(red, RedisStore)
    red.begin("m/a")
    red._view.others_in_flight = {"m/a": 4, "m/z": 2}  # as a read of the other replicas sets it
    keys = ("m/a", "m/z", "m/b")
    assert red.in_flight_of(keys) == [red.in_flight(k) for k in keys] == [5, 2, 0]
    assert mem.in_flight_of(()) == []


async def test_make_store_and_protocol() -> None:
    mem = make_store(None, replica_id="r1", flush_interval_s=1.0)
    assert isinstance(mem, MemoryStore) and isinstance(mem, TelemetryStore)
    await mem.start()
    await mem.stop()
    assert isinstance(make_store("", replica_id="r1"), MemoryStore)
    red = make_store("redis://127.0.0.1:1/0", replica_id="r1")
    assert isinstance(red, RedisStore) and isinstance(red, TelemetryStore)


def test_series_gives_each_bucket_in_the_window_oldest_first(clock: FakeClock, make_sample: SampleFactory) -> None:
    store = MemoryStore(clock=clock)
    start = clock.now
    for i in range(40):  # one sample every 5 s for 200 s: two per 10 s bucket
        store.record(make_sample(at=start + 5 * i, e2e_ms=0.0, decode_tps=100.0 + i))
    clock.advance(200)
    series = store.series(KEY, 60)
    assert [t for t, _ in series] == sorted(t for t, _ in series)
    assert all(t % 10 == 0 for t, _ in series) and clock.now - series[0][0] <= 70
    assert [b.requests for _, b in series] == [2] * len(series) and len(series) == 6
    assert sum(b.requests for _, b in store.series(KEY, 1800)) == 40
    assert store.series("never/seen") == []
    series[0][1].merge(series[1][1])  # a copy: changing it changes nothing in the store
    assert store.series(KEY, 60)[0][1].requests == 2


def test_busy_s_integrates_the_in_flight_count_over_time(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("time.perf_counter", lambda: now[0])
    store = MemoryStore()
    assert store.busy_s(KEY) == 0.0
    store.begin(KEY)
    store.begin(KEY)
    now[0] = 101.0
    assert store.busy_s(KEY) == 2.0  # two in flight for a second
    store.end(KEY)
    now[0] = 103.0
    assert store.busy_s(KEY) == 4.0  # then one for two more
    store.end(KEY)
    now[0] = 110.0
    assert store.busy_s(KEY) == 4.0  # none since
