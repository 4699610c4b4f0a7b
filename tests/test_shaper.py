"""The request shaper: token buckets per provider, local or shared through Redis, priority waiting."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import redis.asyncio

from gateway.redisconn import ensure_connected
from gateway.shaper import Shaper, estimated_tokens
from tests.routing.helpers import catalogue, endpoint


def _endpoint(tmp_path: Path, limits: dict[str, float]):  # type: ignore[no-untyped-def]
    cat = catalogue(tmp_path, [endpoint("p")], provider_fields={"p": {"rate_limits": limits}})
    return cat.models["m"][0]


async def _admitted(shaper: Shaper, ep, n: int, tokens: int = 10, wait: float = 0.0) -> int:  # type: ignore[no-untyped-def]
    got = await asyncio.gather(*(shaper.acquire(ep, tokens, "normal", wait) for _ in range(n)))
    return sum(got)


def test_local_bucket_admits_its_burst_then_refills_at_the_rate(tmp_path: Path) -> None:
    ep = _endpoint(tmp_path, {"requests_per_minute": 600, "burst_s": 1})  # 10 a second, burst 10

    async def run() -> tuple[int, int, int]:
        shaper = Shaper([ep.provider])
        await shaper.start()
        try:
            first = await _admitted(shaper, ep, 20)  # no waiting: the rest spill
            await asyncio.sleep(0.5)
            later = await _admitted(shaper, ep, 20)
            waited = await _admitted(shaper, ep, 3, wait=1.0)  # these wait their turn
            return first, later, waited
        finally:
            await shaper.stop()

    first, later, waited = asyncio.run(run())
    assert first == 8  # the burst (10), less what refills in two sync intervals (module doc)
    assert 3 <= later <= 8
    assert waited == 3


def test_tokens_per_minute_counts_the_estimate(tmp_path: Path) -> None:
    ep = _endpoint(tmp_path, {"tokens_per_minute": 6000, "burst_s": 10})  # a burst of ~1000 tokens

    async def run() -> int:
        shaper = Shaper([ep.provider])
        return await _admitted(shaper, ep, 10, tokens=300)

    assert asyncio.run(run()) == 3
    assert estimated_tokens(400, 100) == 200 and estimated_tokens(0, None) == 512


def test_waiters_are_served_high_priority_first(tmp_path: Path) -> None:
    ep = _endpoint(tmp_path, {"requests_per_minute": 60, "burst_s": 1})  # burst 1, then one a second

    async def run() -> list[str]:
        shaper = Shaper([ep.provider], sync_s=0.05)
        two_waiting = asyncio.Event()
        shaper.on_queue = lambda key, depth, waited: two_waiting.set() if depth == 2 else None
        await shaper.start()
        order: list[str] = []

        async def one(priority: str) -> None:
            if await shaper.acquire(ep, 1, priority, 5.0):
                order.append(priority)

        try:
            lows = [asyncio.create_task(one("low")) for _ in range(3)]
            # The first low takes the burst; the high joins only once the other two are provably queued.
            await asyncio.wait_for(two_waiting.wait(), 5)
            await asyncio.gather(*lows, one("high"))
        finally:
            await shaper.stop()
        return order

    assert asyncio.run(run()) == ["low", "high", "low", "low"]


def test_providers_without_limits_are_not_shaped(tmp_path: Path) -> None:
    cat = catalogue(tmp_path, [endpoint("p")])
    ep = cat.models["m"][0]
    shaper = Shaper([ep.provider])
    assert not shaper.limits(ep)
    assert asyncio.run(shaper.acquire(ep, 10**9, "low", 0.0))


def test_replicas_share_one_bucket_through_redis(tmp_path: Path, redis_url: str) -> None:
    ep = _endpoint(tmp_path, {"requests_per_minute": 60, "burst_s": 10})  # ten, then one a second
    prefix = f"shape-test-{uuid.uuid4().hex[:8]}"

    async def run() -> int:
        replicas = [Shaper([ep.provider], redis_url, prefix, sync_s=0.05) for _ in range(2)]
        for r in replicas:
            await r.start()
        # Connected first (a cluster client learns the layout on first use): on a busy machine that
        # took longer than the half second measured below once, the first lease timed out, and an
        # outage paces locally from an empty stock.
        await asyncio.gather(*(ensure_connected(r._redis) for r in replicas if r._redis is not None))
        try:
            got = await asyncio.gather(*(_admitted(r, ep, 10, wait=0.5) for r in replicas))
            return sum(got)
        finally:
            for r in replicas:
                await r.stop()

    # Both replicas together: the bucket's ten and what refilled in the half second, never 20.
    assert 9 <= asyncio.run(run()) <= 11


def test_redis_outage_falls_back_to_local_pacing(tmp_path: Path) -> None:
    ep = _endpoint(tmp_path, {"requests_per_minute": 600, "burst_s": 1})

    async def run() -> int:
        shaper = Shaper([ep.provider], "redis://127.0.0.1:1/0", "x", sync_s=0.05)
        await shaper.start()
        try:
            await asyncio.sleep(0.2)  # the first lease fails: outage
            return await _admitted(shaper, ep, 5, wait=1.0)
        finally:
            await shaper.stop()

    assert asyncio.run(run()) == 5


@pytest.mark.parametrize("limits", [{}, {"requests_per_minute": 0}])
def test_bad_limits_are_refused(tmp_path: Path, limits: dict[str, float]) -> None:
    from gateway.config import ConfigError

    with pytest.raises(ConfigError, match="rate_limits"):
        _endpoint(tmp_path, limits)


def test_sharing_resumes_when_redis_is_back(tmp_path: Path, private_redis) -> None:  # type: ignore[no-untyped-def]
    """An outage is not for good: once Redis answers again the replicas lease from the shared bucket."""
    ep = _endpoint(tmp_path, {"requests_per_minute": 600, "burst_s": 1})

    async def run() -> tuple[bool, bool, int]:
        shaper = Shaper([ep.provider], private_redis.url, "back", sync_s=0.05)
        await shaper.start()
        try:
            private_redis.stop()
            await _admitted(shaper, ep, 1)  # wakes the shaper: its lease fails
            await asyncio.sleep(0.3)
            down = shaper.outage.down
            private_redis.start()
            for _ in range(60):  # within a few seconds
                await _admitted(shaper, ep, 1)
                await asyncio.sleep(0.1)
                if not shaper.outage.down:
                    break
            admin = redis.asyncio.from_url(private_redis.url)
            try:
                shared = await admin.exists(shaper.key(ep.provider.name))
            finally:
                await admin.aclose()
            return down, shaper.outage.down, shared
        finally:
            await shaper.stop()

    down, still_down, shared = asyncio.run(run())
    assert down and not still_down and shared == 1
