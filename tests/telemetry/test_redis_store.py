"""RedisStore against a real Redis: sharing between replicas, write batching, outages, TTLs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import TimeoutError as RedisTimeoutError

from gateway.redisconn import connect
from gateway.telemetry import RedisStore
from gateway.telemetry.sample import Outcome

from .conftest import FakeClock, SampleFactory, build_sample

pytestmark = pytest.mark.timeout(60)

FAST = {"flush_interval_s": 0.2, "refresh_interval_s": 0.2}
LOGGER = "ultraroute.telemetry"


async def eventually(pred: Callable[[], bool], timeout: float, step: float = 0.05) -> float:
    """Wait until pred() holds; returns the seconds it took. Fails after `timeout`."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(step)
    return time.monotonic() - t0


@pytest.fixture
async def stores() -> AsyncIterator[Callable[..., Awaitable[RedisStore]]]:
    """Factory for started RedisStores, all stopped at the end."""
    made: list[RedisStore] = []

    async def make(url: str, replica_id: str, **kw: object) -> RedisStore:
        st = RedisStore(url, replica_id=replica_id, **kw)  # type: ignore[arg-type]
        await st.start()
        made.append(st)
        return st

    yield make
    for st in made:
        await st.stop()


async def test_samples_recorded_on_one_replica_reach_the_other(
    redis_url: str, key_prefix: str, stores, make_sample: SampleFactory
) -> None:
    a = await stores(redis_url, "A", key_prefix=key_prefix, **FAST)
    b = await stores(redis_url, "B", key_prefix=key_prefix, **FAST)
    now = time.time()
    for i in range(100):
        outcome = Outcome.OK if i % 10 else Outcome.TIMEOUT
        a.record(make_sample("m/x", at=now, ttft_ms=200.0 + i, outcome=outcome, cached_input_tokens=2,
                             cache_write_input_tokens=3))
    took = await eventually(lambda: b.stats("m/x", 60).requests == 100, timeout=2.0)
    assert took < 2.0
    sb = b.stats("m/x", 60)
    assert sb.timeout_rate == pytest.approx(0.1)
    assert sb.ttft_ms is not None and sb.ttft_ms.p50 == pytest.approx(250, rel=0.02)
    assert sb.tokens.input == 100 * 100
    assert (sb.tokens.cached_input, sb.tokens.cache_write_input) == (200, 300)  # cache reads and writes apart
    assert "m/x" in list(b.keys())
    # A's own view = Redis (its flushed data) + nothing pending: no double counting
    await eventually(lambda: a.flushes >= 2 and a.refreshes >= 2, timeout=2.0)
    a.cache_ttl_s = 0.0
    assert a.stats("m/x", 60).requests == 100
    # ... and while some are still pending
    for _ in range(5):
        a.record(make_sample("m/x", at=time.time()))
    assert a.stats("m/x", 60).requests == 105
    await asyncio.sleep(0.6)
    assert a.stats("m/x", 60).requests == 105
    # the EWMA is local to the replica that observed the samples
    assert a.stats("m/x").ewma_ttft_ms is not None
    assert b.stats("m/x").ewma_ttft_ms is None


async def test_in_flight_sums_across_replicas(redis_url: str, key_prefix: str, stores) -> None:
    a = await stores(redis_url, "A", key_prefix=key_prefix, **FAST)
    b = await stores(redis_url, "B", key_prefix=key_prefix, **FAST)
    assert a.begin("m/x") == 0
    a.begin("m/x")
    b.begin("m/x")
    await eventually(lambda: a.in_flight("m/x") == 3 and b.in_flight("m/x") == 3, timeout=3.0)
    assert b.begin("m/x") == 3  # the count before this attempt, all replicas
    b.end("m/x")
    a.end("m/x")
    await eventually(lambda: b.in_flight("m/x") == 2, timeout=2.0)
    # a replica that stops cleanly withdraws its in-flight counts at once
    await b.stop()
    await eventually(lambda: a.in_flight("m/x") == 1, timeout=2.0)


async def test_crashed_replica_in_flight_expires(redis_url: str, key_prefix: str, stores) -> None:
    a = await stores(redis_url, "A", key_prefix=key_prefix, **FAST)
    b = await stores(redis_url, "B", key_prefix=key_prefix, **FAST)
    b.begin("m/x")
    b.begin("m/x")
    await eventually(lambda: a.in_flight("m/x") == 2, timeout=3.0)
    assert b._task is not None
    b._task.cancel()  # the process died: no final flush
    took = await eventually(lambda: a.in_flight("m/x") == 0, timeout=5.0)
    assert took <= b.inflight_ttl_s + 1.5


async def test_every_key_written_has_a_ttl(redis_url: str, key_prefix: str, stores, make_sample) -> None:
    a = await stores(redis_url, "A", key_prefix=key_prefix, **FAST)
    b = await stores(redis_url, "B", key_prefix=key_prefix, **FAST)
    now = time.time()
    for i in range(20):
        a.record(make_sample(f"m/e{i % 4}", at=now - (i % 3) * 10))
        b.record(make_sample("m/other", at=now))
    a.begin("m/e0")
    # a late write (a bucket already settled) also creates the late-marker key
    a.record(make_sample("m/e1", at=now - 60))
    await eventually(lambda: a.flushes >= 3 and b.flushes >= 3, timeout=3.0)
    client = connect(redis_url, timeout_s=2.0, decode_responses=True)
    tag = f"{{{key_prefix}}}"  # every key of the store is under this hash tag (one cluster slot)
    try:
        keys = [k async for k in client.scan_iter(match=f"*{key_prefix}*")]
        assert all(k.startswith(f"{tag}:") for k in keys), keys
        assert f"{tag}:endpoints" in keys and f"{tag}:late" in keys
        assert f"{tag}:inflight:A" in keys and f"{tag}:replicas" in keys
        assert sum(k.startswith(f"{tag}:b:") for k in keys) >= 5
        for k in keys:
            ttl = await client.ttl(k)
            assert ttl > 0, k
            if k.startswith(f"{tag}:b:"):
                assert ttl <= a.bucket_ttl_s + a.bucket_s
    finally:
        await client.aclose()


async def test_writes_are_batched_per_interval_not_per_sample(private_redis, stores, make_sample) -> None:
    """500 samples in ~1.5 s: round trips and HINCRBYs follow the flush interval, not the samples."""
    admin = aioredis.from_url(private_redis.url, decode_responses=True)
    try:
        flush_s = 0.25
        a = await stores(private_redis.url, "A", flush_interval_s=flush_s, refresh_interval_s=1000.0)
        await eventually(lambda: a.flushes >= 1, timeout=2.0)
        cmd0 = await admin.info("commandstats")
        tot0 = (await admin.info("stats"))["total_commands_processed"]
        flushes0 = a.flushes
        t0 = time.monotonic()
        for i in range(500):
            a.record(make_sample("m/x", at=time.time(), ttft_ms=400.0, decode_tps=900.0))
            if i % 50 == 49:
                await asyncio.sleep(0.15)
        await eventually(lambda: not a._pending, timeout=2.0)
        elapsed = time.monotonic() - t0
        cmd1 = await admin.info("commandstats")
        tot1 = (await admin.info("stats"))["total_commands_processed"]
    finally:
        await admin.aclose()

    def calls(stats: dict, name: str) -> int:
        return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))

    flushes = a.flushes - flushes0
    incr = sum(calls(cmd1, c) - calls(cmd0, c) for c in ("hincrby", "hincrbyfloat"))
    total = tot1 - tot0 - 2  # minus our own two INFO calls
    max_flushes = elapsed / flush_s + 2
    assert 3 <= flushes <= max_flushes, (flushes, elapsed)
    # A bucket here has 34 fields (n:ok, tok:in, tok:out, cost, 4 sketch bins, 4 sketch sums, 2 fits x 6
    # sums, the prefill fit's 10); a flush writes the buckets its samples fell in: one, or two when it
    # straddles a 10 s bucket boundary, which these ~1.5 s do at most once. Per sample it would be 500 x 34.
    assert incr <= (flushes + 1) * 34, (incr, flushes)
    # per flush: those + the EVAL carrying them, its dedup SET, EXPIREs, directory and in-flight upkeep
    # (Redis counts the commands a script runs, so this is the real work per flush). The field writes
    # are bounded above (a straddled bucket boundary writes a second bucket once), the upkeep here.
    assert total - incr <= flushes * 16, (total, incr, flushes)
    assert incr < 500 and total < 500  # i.e. nothing per sample
    assert calls(cmd1, "eval") - calls(cmd0, "eval") <= flushes  # one EVAL per flush round trip
    # and the data is all there
    st = RedisStore(private_redis.url, replica_id="reader", **FAST)
    await st.start()
    try:
        await eventually(lambda: st.stats("m/x", 60).requests == 500, timeout=3.0)
    finally:
        await st.stop()


async def test_outage_keeps_local_data_logs_once_and_resyncs(
    private_redis, stores, make_sample: SampleFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    a = await stores(private_redis.url, "A", **FAST)
    b = await stores(private_redis.url, "B", **FAST)
    a.cache_ttl_s = b.cache_ttl_s = 0.0
    for _ in range(10):
        a.record(make_sample("m/before", at=time.time()))
    await eventually(lambda: b.stats("m/before", 60).requests == 10, timeout=2.0)

    private_redis.stop()
    for i in range(30):
        a.record(make_sample("m/outage", at=time.time(), input_tokens=7))
        st = a.stats("m/outage", 60)  # never raises, sees local data at once
        assert st.requests == i + 1
        await asyncio.sleep(0.05)
    await eventually(lambda: a.redis_errors >= 3 and b.redis_errors >= 3, timeout=5.0)
    assert not a.connected
    assert a.stats("m/outage", 60).tokens.input == 30 * 7
    assert a.stats("m/before", 60).requests == 10  # the last merged view is kept
    assert b.stats("m/outage", 60).requests == 0
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    assert len(warnings) == 2, [r.getMessage() for r in warnings]  # one per replica, not per round trip
    assert {"telemetry[A]", "telemetry[B]"} == {r.getMessage().split(":")[0] for r in warnings}

    private_redis.start()  # same port, empty data
    took = await eventually(lambda: b.stats("m/outage", 60).requests == 30, timeout=5.0)
    assert took < 5.0
    assert b.stats("m/outage", 60).tokens.input == 30 * 7
    assert a.connected and b.connected
    assert a.stats("m/outage", 60).requests == 30  # not double counted after the resync
    warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]
    assert len(warnings) == 2
    recovered = [r for r in caplog.records if "reachable again" in r.getMessage()]
    assert len(recovered) == 2


async def test_unreachable_redis_never_raises_and_pending_stays_bounded(clock: FakeClock) -> None:
    store = RedisStore("redis://127.0.0.1:1/0", replica_id="A", clock=clock, flush_interval_s=0.05,
                       refresh_interval_s=0.05)
    await store.start()
    try:
        for i in range(400):  # 400 different 10 s buckets, ~67 min of simulated traffic
            store.record(build_sample("m/x", at=clock.now))
            store.begin("m/x")
            store.stats("m/x", 1800)
            clock.advance(10)
            if i % 50 == 0:
                await asyncio.sleep(0.06)
        await eventually(lambda: store.redis_errors >= 2, timeout=3.0)
        await asyncio.sleep(0.3)
        pending = sum(len(w) for w in store._pending.values())
        assert pending <= 1800 / 10 + 3
        assert store.dropped_buckets > 0
        store.cache_ttl_s = 0.0
        st = store.stats("m/x", 1800)
        assert 170 <= st.requests <= 185  # the last 30 min of local data
        assert store.in_flight("m/x") == 400
    finally:
        t0 = time.monotonic()
        await store.stop()
        assert time.monotonic() - t0 < 3.0


async def test_max_pending_buckets_drops_oldest(clock: FakeClock) -> None:
    store = RedisStore("redis://127.0.0.1:1/0", replica_id="A", clock=clock, max_pending_buckets=20)
    store.cache_ttl_s = 0.0
    for i in range(60):
        store.record(build_sample(f"m/e{i % 3}", at=clock.now + i * 10))
    clock.advance(600)
    assert sum(store.stats(f"m/e{i}", 1800).requests for i in range(3)) == 60
    store._bound_pending(clock.now)
    kept = sorted(idx for w in store._pending.values() for idx in w.indices())
    assert len(kept) == 20
    assert kept[0] == int((clock.now - 600 + 40 * 10) // 10)  # the 20 newest survive
    assert store.dropped_buckets == 40
    assert sum(store.stats(f"m/e{i}", 1800).requests for i in range(3)) == 20


async def test_late_write_into_settled_bucket_is_reread(redis_url: str, key_prefix: str, stores) -> None:
    clock = FakeClock(time.time())
    a = await stores(redis_url, "A", key_prefix=key_prefix, clock=clock, **FAST)
    b = await stores(redis_url, "B", key_prefix=key_prefix, clock=clock, **FAST)
    b.cache_ttl_s = 0.0
    t_old = clock.now
    a.record(build_sample("m/x", at=t_old))
    await eventually(lambda: b.stats("m/x", 300).requests == 1, timeout=2.0)
    clock.advance(60)  # the bucket settles; B reads it a last time and caches it
    refreshes = b.refreshes
    await eventually(lambda: b.refreshes >= refreshes + 3, timeout=2.0)
    idx = int(t_old // b.bucket_s)
    lo, hi = b._view.planner.cold_done["m/x"]
    assert lo <= idx <= hi
    # A files a sample into that old bucket (e.g. deltas held back by an outage)
    a.record(build_sample("m/x", at=t_old))
    await eventually(lambda: b.stats("m/x", 300).requests == 2, timeout=3.0)


async def test_new_replica_loads_history(redis_url: str, key_prefix: str, stores) -> None:
    now = time.time()
    a = await stores(redis_url, "A", key_prefix=key_prefix, **FAST)
    for age in range(0, 1700, 20):  # samples spread over ~28 min
        a.record(build_sample("m/x", at=now - age))
        a.record(build_sample("m/y", at=now - age))
    await eventually(lambda: not a._pending and a.flushes >= 2, timeout=3.0)
    c = await stores(redis_url, "C", key_prefix=key_prefix, max_reads_per_refresh=40, **FAST)
    await eventually(lambda: c.stats("m/x", 1800).requests == 85 and c.stats("m/y", 1800).requests == 85,
                     timeout=10.0)
    assert 3 <= c.stats("m/x", 60).requests <= 4  # ages 0, 20, 40 (and 60: bucket granularity)
    assert c.stats("m/x", 60).age_s is not None


async def test_flush_with_lost_reply_is_resent_and_applied_once(
    redis_url: str, key_prefix: str, stores
) -> None:
    """Redis applied a flush but the reply never came back: the re-send is deduplicated (exactly once)."""
    a = await stores(redis_url, "A", key_prefix=key_prefix, **FAST)
    b = await stores(redis_url, "B", key_prefix=key_prefix, **FAST)
    await eventually(lambda: a.flushes >= 1, timeout=2.0)
    assert a._client is not None
    real_pipeline = a._client.pipeline
    lost = {"n": 0}

    def pipeline_losing_one_reply(*args: object, **kw: object):
        pipe = real_pipeline(*args, **kw)
        real_execute, real_eval = pipe.execute, pipe.eval
        carries: list[bool] = []

        def eval_(*args: object, **kw: object):  # works for both pipeline classes (server, cluster)
            carries.append("HINCRBY" in str(args))
            return real_eval(*args, **kw)

        async def execute(raise_on_error: bool = True):
            carries_data = any(carries)
            result = await real_execute(raise_on_error=raise_on_error)
            if carries_data and lost["n"] == 0:
                lost["n"] = 1
                raise RedisTimeoutError("reply lost (test)")  # Redis did apply it
            return result

        pipe.execute = execute  # type: ignore[method-assign]
        pipe.eval = eval_  # type: ignore[method-assign]
        return pipe

    a._client.pipeline = pipeline_losing_one_reply  # type: ignore[method-assign]
    for _ in range(25):
        a.record(build_sample("m/x", at=time.time()))
    await eventually(lambda: lost["n"] == 1 and not a._unacked and a.flushes >= 3, timeout=5.0)
    assert a.redis_errors >= 1
    b.cache_ttl_s = a.cache_ttl_s = 0.0
    await eventually(lambda: b.stats("m/x", 60).requests == 25, timeout=3.0)
    await asyncio.sleep(0.6)
    assert b.stats("m/x", 60).requests == 25  # not 50
    assert a.stats("m/x", 60).requests == 25


async def test_large_backlog_is_flushed_in_bounded_chunks(redis_url: str, key_prefix: str, stores) -> None:
    a = await stores(redis_url, "A", key_prefix=key_prefix, max_commands_per_flush=60, **FAST)
    b = await stores(redis_url, "B", key_prefix=key_prefix, **FAST)
    flushes0 = a.flushes
    now = time.time()
    for i in range(30):
        a.record(build_sample(f"m/e{i}", at=now, ttft_ms=100.0 + i))
    await eventually(lambda: sum(b.stats(f"m/e{i}", 60).requests for i in range(30)) == 30, timeout=5.0)
    assert a.flushes - flushes0 >= 30 * 14 // 60  # ~14 commands per endpoint, at most 60 per flush
    assert a.stats("m/e7", 60).requests == 1


async def test_view_read_returns_once_a_new_replica_has_read_the_whole_history(
        redis_url: str, key_prefix: str, stores) -> None:
    """What warm-up waits for before it decides which endpoints nobody has measured."""
    now = time.time()
    a = await stores(redis_url, "A", key_prefix=key_prefix, **FAST)
    for age in range(0, 1700, 20):
        a.record(build_sample("m/x", at=now - age))
    await eventually(lambda: not a._pending and a.flushes >= 2, timeout=3.0)
    c = await stores(redis_url, "C", key_prefix=key_prefix, max_reads_per_refresh=20, **FAST)
    async with asyncio.timeout(10):
        await c.view_read()
    assert c.refreshes >= 2  # the history took several reads: view_read waited for all of them
    assert c.stats("m/x", 1800).requests == 85


async def test_a_view_read_in_its_second_half_is_rebuilt_by_the_timer(
    redis_url: str, key_prefix: str, stores, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The refresh-ahead timer (StoreBase) rebuilds a Redis store's view as a memory store's: it once
    called RedisStore's own `_refresh()` (its Redis read) by name, a TypeError logged in every timer."""
    store = await stores(redis_url, "A", key_prefix=key_prefix, clock=clock, cache_ttl_s=0.04)
    store.record(build_sample("m/x", at=clock.now))
    first = store.stats("m/x", 300)
    store.record(build_sample("m/x", at=clock.now))
    clock.advance(0.025)  # past half the TTL
    with caplog.at_level(logging.ERROR):
        assert store.stats("m/x", 300) is first
        await asyncio.sleep(0.1)  # the timer (due in ~11 ms) has run
    assert "Traceback" not in caplog.text and "TypeError" not in caplog.text
    clock.advance(0.02)  # the first view would have expired now: the one the timer made is served
    rebuilt = store.stats("m/x", 300)
    assert rebuilt is not first and rebuilt.requests == 2


async def test_a_refresh_shares_the_flush_s_wakeup_after_a_backlog(redis_url: str, key_prefix: str, stores) -> None:
    """Refreshes that a start-up backlog put out of step (10 ms apart, then every interval from
    there: ~0.1 s after each flush here) fall back in step with the flushes: one wakeup a round, the
    refresh started as the flush ends (no wait between them: the loop is not given back)."""
    loop = asyncio.get_running_loop()
    flushed: list[float] = []  # when each flush ended
    refreshed: list[float] = []
    backlog = iter([True] * 10)  # the first ten refreshes say "more to read"

    class Recording(RedisStore):
        async def _flush(self, final: bool = False) -> bool:
            try:
                return await super()._flush(final)
            finally:
                flushed.append(loop.time())

        async def _refresh(self) -> bool:
            refreshed.append(loop.time())
            more = await super()._refresh()
            return next(backlog, more)

    store = Recording(redis_url, replica_id="A", key_prefix=key_prefix, **FAST)
    await store.start()
    try:
        await eventually(lambda: len(flushed) >= 8, timeout=5.0)
    finally:
        await store.stop()
    later = [t for t in refreshed if t > flushed[2]]
    assert len(later) >= 4
    for t in later:  # each as a flush of the same wakeup ends (out of step, 0.1 s after one)
        assert min(t - f for f in flushed if f <= t) < 0.05, (t, flushed)
