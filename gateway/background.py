"""What the gateway's background tasks (health sharing, usage sharing, the key ring) have in common.

`Outage`: how a task that shares state through Redis reports the store going away: one warning
when an outage starts and one when it ends, never one per failed round trip, and a count of
failures for `/metrics`. (The telemetry store has its own, with backoff: `telemetry/redis_store.py`.)
`cancel_and_wait`: stop a task and wait until it has stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable


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


async def cancel_and_wait(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
