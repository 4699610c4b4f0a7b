"""Cost of the telemetry request path: record() and stats() per call, MemoryStore and RedisStore.

Not a test. Run: `.venv/bin/python benchmarks/telemetry_record.py [--redis-url URL] [--endpoints N]
[--memory]`. Prints ns/op figures; RedisStore also reports its background flush/refresh round trips.
`--memory` fills a MemoryStore with 30 simulated minutes of traffic and reports its size.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import time
import tracemalloc
import uuid
from collections.abc import Callable

from gateway.redisconn import connect
from gateway.telemetry import AttemptSample, MemoryStore, Outcome, RedisStore
from gateway.telemetry.store import StoreBase

WINDOWS = (60, 300, 1800)


def make_samples(n: int, endpoints: int, now: float, spread_s: float = 5.0) -> list[AttemptSample]:
    r = random.Random(42)
    outcomes = [Outcome.OK] * 95 + [Outcome.SERVER_ERROR, Outcome.TIMEOUT, Outcome.RATE_LIMITED,
                                    Outcome.CANCELLED, Outcome.CLIENT_ERROR]
    out = []
    for i in range(n):
        ttft = r.lognormvariate(-0.9, 0.5)
        out.append(AttemptSample(
            endpoint_key=f"m/ep{i % endpoints}", started_at=now - r.uniform(0, spread_s) - 3,
            outcome=r.choice(outcomes), status=200, ttft_s=ttft, ttfat_s=ttft * 1.5,
            decode_tps=r.lognormvariate(6.5, 0.3), e2e_s=3.0 + r.random(), input_tokens=r.randint(50, 4000),
            cached_input_tokens=r.randint(0, 1000), output_tokens=r.randint(10, 2000),
            reasoning_tokens=r.randint(0, 500), cost_usd=r.random() / 100,
        ))
    return out


def per_op_ns(fn: Callable[[], None], n: int) -> float:
    t0 = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - t0) / n


def bench_store(name: str, store: StoreBase, samples: list[AttemptSample], keys: list[str]) -> None:
    n = len(samples)
    record = store.record

    def do_record() -> None:
        for s in samples:
            record(s)

    rec_ns = per_op_ns(do_record, n)
    stats = store.stats
    lookups = [(keys[i % len(keys)], WINDOWS[i % 3]) for i in range(100_000)]

    def do_stats() -> None:
        for k, w in lookups:
            stats(k, w)

    ttl = store.cache_ttl_s
    store.cache_ttl_s = 3600.0  # measure pure cache hits (in production an entry lives cache_ttl_s)
    for k in keys:  # warm the cache
        for w in WINDOWS:
            stats(k, w)
    hit_ns = per_op_ns(do_stats, len(lookups))
    store.cache_ttl_s = 0.0  # every call recomputes: the cost paid once per TTL per (endpoint, window)
    miss = {w: per_op_ns(lambda w=w: [stats(k, w) for k in keys], len(keys)) for w in WINDOWS}
    store.cache_ttl_s = ttl
    begin, end = store.begin, store.end

    def do_inflight() -> None:
        for k, _ in lookups:
            begin(k)
            end(k)

    inflight_ns = per_op_ns(do_inflight, len(lookups))
    print(f"{name:12s} record(): {rec_ns:8.0f} ns/op   stats() cached: {hit_ns:6.0f} ns/op   "
          f"begin()+end(): {inflight_ns:5.0f} ns")
    print(f"{'':12s} stats() recompute (cache miss) per endpoint: "
          + "  ".join(f"{w}s: {miss[w] / 1000:6.1f} us" for w in WINDOWS))


def bench_memory(endpoints: int, n: int, seconds: float) -> None:
    now = time.time()
    store = MemoryStore()
    samples = make_samples(n, endpoints, now)
    keys = sorted({s.endpoint_key for s in samples})
    bench_store("MemoryStore", store, samples, keys)
    asyncio.run(live_load(MemoryStore(), endpoints, 1000.0, seconds, 10))


async def live_load(store: StoreBase, endpoints: int, rps: float, seconds: float, candidates: int) -> None:
    """Simulated live traffic: `rps` attempts/s, each preceded by stats() for `candidates` endpoints.

    Reports the time spent inside record()/stats() and the process CPU left for everything else
    (for a RedisStore: the background flush/refresh work).
    """
    r = random.Random(9)
    keys = [f"m/ep{i}" for i in range(endpoints)]
    rec_ns = st_ns = 0
    n_rec = n_st = 0
    cpu0 = time.process_time()
    t_end = time.monotonic() + seconds
    tick = 0.01
    per_tick = max(1, int(rps * tick))
    while time.monotonic() < t_end:
        t_tick = time.monotonic()
        now = time.time()
        batch = make_samples(per_tick, endpoints, now, spread_s=0.01)
        for s in batch:
            t0 = time.perf_counter_ns()
            for _ in range(candidates):
                store.stats(keys[r.randrange(endpoints)], 300)
            t1 = time.perf_counter_ns()
            store.record(s)
            t2 = time.perf_counter_ns()
            st_ns += t1 - t0
            rec_ns += t2 - t1
            n_st += candidates
            n_rec += 1
        await asyncio.sleep(max(0.0, tick - (time.monotonic() - t_tick)))
    cpu = time.process_time() - cpu0
    other_cpu = cpu - (rec_ns + st_ns) / 1e9
    print(f"{type(store).__name__:12s} live {rps:.0f} attempts/s, {endpoints} endpoints, "
          f"{candidates} stats()/attempt for {seconds:.0f}s: record() {rec_ns / n_rec:6.0f} ns/op, "
          f"stats() {st_ns / n_st:6.0f} ns/op "
          f"(cache hits and misses), CPU {cpu / seconds * 100:4.1f}% of a core, "
          f"of which outside record/stats {max(0.0, other_cpu) / seconds * 100:4.1f}%")


async def bench_redis(url: str, endpoints: int, n: int, seconds: float) -> None:
    prefix = f"ur:bench:{uuid.uuid4().hex[:8]}"
    store = RedisStore(url, replica_id="bench", key_prefix=prefix)
    await store.start()
    try:
        await live_load(store, endpoints, 1000.0, seconds, 10)
        flush_ms = store.flush_seconds / max(1, store.flushes) * 1000
        refresh_ms = store.refresh_seconds / max(1, store.refreshes) * 1000
        print(f"{'':12s} background during the live run: {store.flushes} flushes, {flush_ms:.1f} ms each; "
              f"{store.refreshes} refreshes, {refresh_ms:.1f} ms each (wall, incl. Redis); "
              f"redis_errors={store.redis_errors}")
        now = time.time()
        samples = make_samples(n, endpoints, now)
        keys = sorted({s.endpoint_key for s in samples})
        bench_store("RedisStore", store, samples[:50_000], keys)
    finally:
        await store.stop()
        client = connect(url, timeout_s=5.0)
        keys_ = [k async for k in client.scan_iter(match=f"{{{prefix}}}:*", count=1000)]
        if keys_:
            await client.delete(*keys_)
        await client.aclose()


def bench_footprint(endpoints: int, rps: float) -> None:
    """30 simulated minutes at `rps` spread over `endpoints`: bytes held by a MemoryStore."""
    gc.collect()
    tracemalloc.start()
    start = time.time()
    clock_now = [start]
    store = MemoryStore(clock=lambda: clock_now[0])
    r = random.Random(1)
    total = int(1800 * rps)
    step = 1800 / total
    for i in range(total):
        t = start + i * step
        clock_now[0] = t
        ttft = r.lognormvariate(-0.9, 0.5)
        store.record(AttemptSample(
            endpoint_key=f"m/ep{i % endpoints}", started_at=t - 3, outcome=Outcome.OK, status=200,
            ttft_s=ttft, ttfat_s=ttft * 1.5, decode_tps=r.lognormvariate(6.5, 0.3), e2e_s=3.0,
            input_tokens=100, output_tokens=200, cost_usd=0.001))
        if i % 5000 == 0:
            for k in range(endpoints):
                store.stats(f"m/ep{k}", 300)
    for k in range(endpoints):
        for w in WINDOWS:
            store.stats(f"m/ep{k}", w)
    cur, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(f"footprint    MemoryStore, {endpoints} endpoints, {rps:.0f} req/s for 30 min ({total} samples): "
          f"{cur / 1e6:.1f} MB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    ap.add_argument("--endpoints", type=int, default=200)
    ap.add_argument("--samples", type=int, default=200_000)
    ap.add_argument("--seconds", type=float, default=5.0, help="duration of the live-load runs")
    ap.add_argument("--memory", action="store_true", help="also measure the 30-minute footprint")
    args = ap.parse_args()
    bench_memory(args.endpoints, args.samples, args.seconds)
    asyncio.run(bench_redis(args.redis_url, args.endpoints, args.samples, args.seconds))
    if args.memory:
        bench_footprint(args.endpoints, 1000.0)


if __name__ == "__main__":
    main()
