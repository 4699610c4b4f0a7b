"""`serve/respond.unless_disconnected`: a request's work is abandoned when its client hangs up, and only
then. (The end-to-end side, the upstream cancelled, is in test_e2e_proxy.py.)"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from starlette.responses import Response
from starlette.types import Message

from gateway.serve.respond import WATCH_AFTER_S, unless_disconnected


async def hung_up() -> Message:
    return {"type": "http.disconnect"}


def never_hangs_up(calls: list[float]) -> Callable[[], Awaitable[Message]]:
    async def receive() -> Message:
        calls.append(time.perf_counter())
        await asyncio.Event().wait()
        raise AssertionError("unreachable")
    return receive


async def test_a_client_that_hangs_up_at_once_is_noticed_after_the_watch_delay() -> None:
    abandoned = asyncio.Event()

    async def work() -> Response:
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            abandoned.set()
            raise
        return Response(status_code=200)

    started = time.perf_counter()
    response = await unless_disconnected(work(), hung_up)
    took = time.perf_counter() - started
    assert response.status_code == 499 and abandoned.is_set()
    assert WATCH_AFTER_S * 0.9 <= took < WATCH_AFTER_S + 1.0


async def test_a_short_request_is_answered_without_listening_for_its_client() -> None:
    calls: list[float] = []

    async def work() -> Response:
        return Response(status_code=200)

    response = await unless_disconnected(work(), never_hangs_up(calls))
    await asyncio.sleep(WATCH_AFTER_S * 2)  # the watch, had it been left scheduled, would have started
    assert response.status_code == 200 and calls == []


async def test_a_long_request_listens_and_stops_listening_when_done() -> None:
    calls: list[float] = []

    async def work() -> Response:
        await asyncio.sleep(WATCH_AFTER_S * 3)
        return Response(status_code=200)

    response = await unless_disconnected(work(), never_hangs_up(calls))
    assert response.status_code == 200 and len(calls) == 1
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await asyncio.sleep(0.01)  # the watcher's cancellation is delivered
    assert all(t.done() for t in pending)


async def test_cancelled_for_another_reason_is_not_taken_for_a_hang_up() -> None:
    async def work() -> Response:
        await asyncio.sleep(5)
        return Response(status_code=200)

    calls: list[float] = []
    task = asyncio.ensure_future(unless_disconnected(work(), never_hangs_up(calls)))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
