"""`gateway.background`: outages logged once at each end, failures counted, tasks stopped, ticks on one grid."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest

from gateway import background
from gateway.background import Outage, cancel_and_wait, next_tick


def test_logged_once_per_outage_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    counted: list[int] = []
    outage = Outage(logging.getLogger("t"), "usage sharing", "limits are per replica")
    outage.on_error = lambda: counted.append(1)
    with caplog.at_level(logging.WARNING, "t"):
        outage.ok()
        for _ in range(3):
            outage.failed(ConnectionError("refused"))
        outage.ok()
        outage.ok()
        outage.failed("keys.json: gone")
    assert [r.getMessage() for r in caplog.records] == [
        "usage sharing: Redis unreachable (ConnectionError); limits are per replica",
        "usage sharing: Redis reachable again",
        "usage sharing: Redis unreachable (keys.json: gone); limits are per replica",
    ]
    assert outage.errors == 4 and len(counted) == 4 and outage.down


async def _loses_one_cancellation() -> None:
    """A background loop whose first cancellation is lost, as inside a library that turns it into an
    error the loop takes for an outage and goes on from."""
    lost = False
    while True:
        try:
            await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            if lost:
                raise
            lost = True


async def test_a_task_that_lost_a_cancellation_is_still_stopped() -> None:
    task = asyncio.create_task(_loses_one_cancellation())
    await asyncio.sleep(0.05)
    stopping = asyncio.create_task(cancel_and_wait(task))
    # Waited on without a timeout that cancels: that cancel would reach `task` through `stopping`.
    done, _ = await asyncio.wait({stopping}, timeout=5)
    try:
        assert stopping in done and task.cancelled()  # one cancel and an await waited for ever here
    finally:
        stopping.cancel()
        task.cancel()



async def _refusing(released: asyncio.Future[None]) -> None:
    """A task no cancellation ends until `released` is: it waits on it shielded, and goes back to it."""
    while not released.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(released)


async def test_the_callers_own_cancellation_is_not_swallowed() -> None:
    released: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(_refusing(released))
    stopping = asyncio.create_task(cancel_and_wait(task))
    await asyncio.sleep(0.05)
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping  # before: swallowed along with the task's own, and the caller went on
    released.set_result(None)
    await task


async def test_a_task_that_will_not_stop_is_left_behind_and_named(caplog: pytest.LogCaptureFixture,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(background, "STOP_WAIT_S", 0.2)
    monkeypatch.setattr(background, "RECANCEL_S", 0.05)
    released: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(_refusing(released), name="stubborn")
    await asyncio.sleep(0.01)  # started: a task cancelled before its first step just ends
    async with asyncio.timeout(5):
        await cancel_and_wait(task, logging.getLogger("test.background"))
    assert "stubborn still running 0.1 s after it was cancelled; cancelling it again" in caplog.text
    assert "stubborn did not stop within" in caplog.text
    released.set_result(None)
    await task


async def test_an_error_the_task_ended_with_is_raised() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="boom"):
        await cancel_and_wait(task)


def test_ticks_of_nested_intervals_fall_on_one_grid() -> None:
    """Usage and health (0.25 s), telemetry (0.5 s) and keys (1 s) wake on shared points: every
    0.5 s and 1 s tick is a 0.25 s tick, whatever the time each round ended."""
    point = next_tick(0.0, 0.25)
    for interval in (0.25, 0.5, 1.0):
        for t in range(0, 1000, 7):
            quarters = (next_tick(t / 100, interval) - point) / 0.25
            assert quarters == pytest.approx(round(quarters), abs=1e-6), (interval, t)


def test_a_tick_is_half_an_interval_to_one_and_a_half_away() -> None:
    """A timer that fires a millisecond before its point (uvloop's clock counts whole ms) does not
    find the same point still ahead and wake again at once; nor does one that fires late."""
    for t in range(1000):
        now = 50 + t / 997
        assert 0.125 <= next_tick(now, 0.25) - now <= 0.375
    point = next_tick(10.0, 0.25)
    assert next_tick(point - 0.001, 0.25) == pytest.approx(point + 0.25)
    assert next_tick(point + 0.002, 0.25) == pytest.approx(point + 0.25)
