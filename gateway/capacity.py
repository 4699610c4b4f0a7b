"""Capacity: the gateway's own cap on concurrent requests per endpoint (catalogue `max_concurrency`).

A request that finds the endpoint full waits in a short queue, ordered by priority
(`x-ultraroute-priority: high | normal | low`, then arrival); when the queue is full, or the wait
would be longer than `max_wait_s`, it does not wait: the dispatcher spills it to the next candidate
(reason `capacity`). A fast tier and guaranteed capacity are different purchases; waiting in line
for one is only worth a moment. Endpoints without `max_concurrency` are not tracked. Local to this
process; nothing here does I/O. Queue depth and waits are reported through `on_queue` (the
`ultraroute_queue_depth` and `ultraroute_queue_wait_seconds` metrics), as the shaper's are.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.config import Endpoint

PRIORITIES = {"high": 0, "normal": 1, "low": 2}


@dataclass(slots=True)
class _Gate:
    active: int = 0
    waiters: list[tuple[int, int, asyncio.Future[None]]] = field(default_factory=list)


class Capacity:
    def __init__(self, queue_limit: int = 8, max_wait_s: float = 0.5) -> None:
        self.queue_limit = queue_limit
        self.max_wait_s = max_wait_s
        self._gates: dict[str, _Gate] = {}
        self._order = itertools.count()
        # (endpoint key, requests waiting now, how long the one leaving waited or None when one joined)
        self.on_queue: Callable[[str, int, float | None], None] = lambda key, depth, waited: None

    async def acquire(self, endpoint: Endpoint, priority: str = "normal") -> bool:
        """Take a slot, waiting briefly in line if need be; False means spill to another candidate."""
        limit = endpoint.max_concurrency
        if limit is None:
            return True
        gate = self._gates.setdefault(endpoint.key, _Gate())
        if gate.active < limit and not gate.waiters:
            gate.active += 1
            return True
        if len(gate.waiters) >= self.queue_limit:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (PRIORITIES.get(priority, 1), next(self._order), waiter)
        heapq.heappush(gate.waiters, entry)
        self.on_queue(endpoint.key, len(gate.waiters), None)
        started = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), self.max_wait_s)
            return True  # release() handed its slot over
        except (TimeoutError, asyncio.CancelledError) as exc:
            if waiter.done() and not waiter.cancelled():
                if isinstance(exc, TimeoutError):
                    return True  # handed over just as the wait ran out: keep the slot
                self.release(endpoint)  # the client went away holding a slot: pass it on
            else:
                gate.waiters.remove(entry)
                heapq.heapify(gate.waiters)
                waiter.cancel()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return False
        finally:
            self.on_queue(endpoint.key, len(gate.waiters), time.perf_counter() - started)

    def release(self, endpoint: Endpoint) -> None:
        if endpoint.max_concurrency is None:
            return
        gate = self._gates.get(endpoint.key)
        if gate is None:
            return
        while gate.waiters:
            _, _, waiter = heapq.heappop(gate.waiters)
            if not waiter.done():
                waiter.set_result(None)  # the slot passes straight to the next in line
                return
        gate.active = max(0, gate.active - 1)
