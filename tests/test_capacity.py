"""The per-endpoint capacity gate: slots, a short priority queue, spilling when it is full."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gateway.capacity import Capacity
from tests.routing.helpers import catalogue, endpoint


async def test_slots_queue_by_priority_and_spill(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a", max_concurrency=1)]).models["m"][0]
    cap = Capacity(queue_limit=2, max_wait_s=1.0)
    assert await cap.acquire(e)
    order: list[str] = []

    async def wait(priority: str) -> None:
        assert await cap.acquire(e, priority)
        order.append(priority)

    low = asyncio.ensure_future(wait("low"))
    await asyncio.sleep(0)
    high = asyncio.ensure_future(wait("high"))
    await asyncio.sleep(0)
    assert not await cap.acquire(e)  # the queue (2) is full: spill at once
    cap.release(e)
    await asyncio.sleep(0.01)
    cap.release(e)
    await asyncio.gather(low, high)
    assert order == ["high", "low"]  # priority first, not arrival


async def test_waiting_too_long_spills(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a", max_concurrency=1)]).models["m"][0]
    cap = Capacity(max_wait_s=0.05)
    assert await cap.acquire(e)
    assert not await cap.acquire(e)
    cap.release(e)
    assert await cap.acquire(e)  # the slot came back


async def test_untracked_without_max_concurrency(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a")]).models["m"][0]
    cap = Capacity()
    assert all([await cap.acquire(e) for _ in range(100)])


async def test_queue_depth_and_waits_are_reported(tmp_path: Path) -> None:
    e = catalogue(tmp_path, [endpoint("a", max_concurrency=1)]).models["m"][0]
    cap = Capacity(max_wait_s=5.0)
    seen: list[tuple[str, int, bool]] = []
    cap.on_queue = lambda key, depth, waited: seen.append((key, depth, waited is not None))
    assert await cap.acquire(e)  # a free slot: no queue, nothing reported
    assert seen == []
    waiters = [asyncio.ensure_future(cap.acquire(e)) for _ in range(2)]
    await asyncio.sleep(0)
    assert seen == [(e.key, 1, False), (e.key, 2, False)]  # each joined the line
    cap.release(e)
    assert await waiters[0]
    cap.release(e)
    assert await waiters[1]
    assert seen[2:] == [(e.key, 1, True), (e.key, 0, True)]  # each left it, with its wait
