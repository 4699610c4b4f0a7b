"""What the gateway's background tasks (health sharing, usage sharing, the key ring) have in common.

`Outage`: how a task that shares state through Redis reports the store going away: one warning
when an outage starts and one when it ends, never one per failed round trip, and a count of
failures for `/metrics`. (The telemetry store has its own, with backoff: `telemetry/redis_store.py`.)
`cancel_and_wait`: stop a task and wait until it has stopped, even if a library loses a cancellation.
`RefreshAhead`: rebuild a cached view on a timer just before it expires, off any request's path.
`next_tick`/`sleep_to_tick`: the periodic Redis tasks (telemetry, usage, health, keys) wake on one
grid per process, so that tasks whose intervals divide each other's share their wakeups.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Hashable


class Outage:
    def __init__(self, log: logging.Logger, what: str, meanwhile: str, store: str = "Redis") -> None:
        self.log = log
        self.store = store
        self.what = what  # e.g. "health sharing"
        self.meanwhile = meanwhile  # what holds until it is back, e.g. "endpoint health stays local"
        self.errors = 0
        self.down = False
        self.on_error: Callable[[], None] = lambda: None  # e.g. Metrics.redis_error

    def failed(self, exc: BaseException | str) -> None:
        self.errors += 1
        self.on_error()
        if not self.down:
            reason = exc if isinstance(exc, str) else type(exc).__name__
            self.log.warning("%s: %s unreachable (%s); %s", self.what, self.store, reason, self.meanwhile)
        self.down = True

    def ok(self) -> None:
        if self.down:
            self.log.warning("%s: %s reachable again", self.what, self.store)
        self.down = False


def next_tick(now: float, interval_s: float) -> float:
    """The first point of this process's grid of `interval_s` at least half an interval after `now`
    (the loop's clock): a timer may fire a little before its point (uvloop's clock counts whole
    milliseconds), and the point it was set for must not come round again at once.

    Each task slept its interval from wherever its last round ended, so an idle full gateway woke
    eleven times a second for its four Redis tasks (usage and health every 0.25 s, telemetry every
    0.5 s, keys every 1 s), each wakeup a few hundred µs of CPU; on one grid they wake four times.
    The grid's phase, the same for every interval (so that the grids of 0.25 s and 0.5 s nest),
    comes from the process id: the workers of one host (one monotonic clock) do not all call Redis
    in the same instant."""
    phase = (os.getpid() % 997) / 997
    after = now + interval_s / 2
    return after + interval_s - (after - phase) % interval_s


async def sleep_to_tick(interval_s: float) -> None:
    """Sleep until the next point of this process's grid of `interval_s` (`next_tick`)."""
    now = asyncio.get_running_loop().time()
    await asyncio.sleep(next_tick(now, interval_s) - now)


RECANCEL_S = 0.5  # a task still running this long after a cancel is cancelled again
STOP_WAIT_S = 10.0  # ... and given up on (and named in the log) after this long


async def cancel_and_wait(task: asyncio.Task[None] | None, log: logging.Logger | None = None) -> None:
    """Cancel `task` and wait until it has ended; an exception it ended with is raised here.

    One cancellation is not always enough. redis-py sends every command through `asyncio.wait_for`,
    which on Python 3.11 returns normally when the task is cancelled just as the send completes (the
    cancellation is lost: CPython bpo-42130, fixed in 3.12); a Redis-sharing loop then goes on to its
    next round, and a single cancel-then-await waited for ever. Seen: SIGTERM'd workers of `serve
    --workers 2` that never finished stopping, their health-sharing or ledger loop still running.
    So the task is cancelled again every `RECANCEL_S`, and left behind, with a warning, after
    `STOP_WAIT_S`. The caller's own cancellation goes through (awaiting the task inside a
    `suppress(CancelledError)` swallowed that too)."""
    if task is None:
        return
    log = log or logging.getLogger("ultraroute")
    waited = 0.0
    while not task.done():
        if waited >= STOP_WAIT_S:
            log.warning("%s did not stop within %.0f s of being cancelled; left behind", task.get_name(), waited)
            return
        if waited:  # rare, and worth knowing where it happens
            log.warning("%s still running %.1f s after it was cancelled; cancelling it again", task.get_name(), waited)
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
        waited += RECANCEL_S
    with contextlib.suppress(asyncio.CancelledError):
        task.result()


class RefreshAhead:
    """Rebuild a cached view by a timer shortly before it expires, not in the request that would find
    it expired: a rebuild costs a few hundred µs (the telemetry store's stats, the router's ranking),
    and at 20 requests/s 1 request in 5 paid it before its upstream was even called (a paced stream's
    time to first token, issue 32 item 11). A view is scheduled when it is read in the second half of
    its life, so one that nobody reads is not kept fresh. Outside an event loop (a command, a test)
    nothing is scheduled: the view is rebuilt when it has expired, as it always was."""

    def __init__(self) -> None:
        self._pending: set[Hashable] = set()

    def schedule(self, key: Hashable, delay_s: float, rebuild: Callable[..., object], *args: object) -> None:
        """Call `rebuild(*args)` in `delay_s`, unless `key` already has a timer."""
        if key in self._pending:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._pending.add(key)
        loop.call_later(max(delay_s, 0.0), self._run, key, rebuild, args)

    def _run(self, key: Hashable, rebuild: Callable[..., object], args: tuple[object, ...]) -> None:
        self._pending.discard(key)
        rebuild(*args)
