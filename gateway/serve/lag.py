"""The event loop's own lag, and time budgets for upstreams that do not count it.

When the gateway's one core is saturated, a callback due now runs late: the loop is busy with other
requests. A first-token or stall budget measured in wall time would then be spent by the gateway's own
queueing and blamed on a healthy provider. `LoopLag` measures the lag with one cheap task (sleep
`interval_s`, see how late it woke); `Budget` is a span of upstream time: `seconds` of wall time plus
whatever lag the loop showed meanwhile, and `Budget.timeout()` is a lag-aware timeout.

Lag is observed at the monitor's wake-ups, plus the lateness of a wake-up that is due but has not run
yet, so a budget checked in the middle of a stall of the loop already sees it. A stall that starts
between two ticks is seen from the next tick's due time: at most `interval_s` of it is missed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType

from gateway.background import cancel_and_wait

INTERVAL_S = 0.05


class LoopLag:
    """Measures how late the running loop runs a timer. One per process (built by `open_services`)."""

    def __init__(self, interval_s: float = INTERVAL_S, on_sample: Callable[[float], None] | None = None) -> None:
        self.interval_s = interval_s
        self.on_sample = on_sample  # each tick's lag, e.g. into the lag histogram
        self._total = 0.0  # lag observed so far, seconds of loop time
        self._due: float | None = None  # when the sleeping tick should wake
        self._task: asyncio.Task[None] | None = None
        # The loop it runs in, once started: budgets read its clock without asking asyncio for the
        # running loop (several times per request; in Python 3.11 each ask is a getpid() system call).
        self.loop: asyncio.AbstractEventLoop | None = None

    def total(self) -> float:
        """Lag observed so far, including how late the pending tick already is."""
        due = self._due
        if due is None or self.loop is None:
            return self._total
        late = self.loop.time() - due
        return self._total + late if late > 0 else self._total

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="loop-lag")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        self._due = None

    async def _run(self) -> None:
        loop = self.loop = asyncio.get_running_loop()
        interval = self.interval_s
        while True:
            self._due = loop.time() + interval
            await asyncio.sleep(interval)
            late = loop.time() - self._due
            lag = late if late > 0 else 0.0
            self._total += lag
            self._due = None
            if self.on_sample is not None:
                self.on_sample(lag)


class Budget:
    """`seconds` of upstream time from now: wall time minus the loop's lag meanwhile."""

    __slots__ = ("_lag", "_lag_at_start", "_start", "loop", "seconds")

    def __init__(self, seconds: float, lag: LoopLag | None = None) -> None:
        self.seconds = seconds
        self._lag = lag
        self.loop = lag.loop if lag is not None and lag.loop is not None else asyncio.get_running_loop()
        self._start = self.loop.time()
        self._lag_at_start = lag.total() if lag is not None else 0.0

    def lag(self) -> float:
        """The loop's lag since the budget started: time that does not count against it."""
        return self._lag.total() - self._lag_at_start if self._lag is not None else 0.0

    def remaining(self) -> float:
        return self._start + self.seconds + self.lag() - self.loop.time()

    def timeout(self) -> _LagAwareTimeout:
        """`with budget.timeout():` around an `await` raises TimeoutError once the budget is spent."""
        return _LagAwareTimeout(self)


class _LagAwareTimeout:
    """A timeout whose deadline moves later by the lag seen while it waits: when the wall-time deadline
    comes, it re-checks the budget and only cancels the waiting task if the upstream's own time is up.

    It does what `asyncio.timeout` does (cancel the task, turn that cancellation into TimeoutError on
    the way out, leave any other cancellation alone) without wrapping one: it runs on every upstream
    read, and a nested `asyncio.timeout` plus its own timer cost ~3% of a request's CPU. A plain
    (sync) context manager: entering and leaving it need no awaits."""

    __slots__ = ("_budget", "_cancelling", "_expired", "_handle", "_loop", "_task")

    def __init__(self, budget: Budget) -> None:
        self._budget = budget

    def __enter__(self) -> None:
        loop = self._loop = self._budget.loop
        task = asyncio.current_task(loop)
        if task is None:
            raise RuntimeError("a budget's timeout must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._expired = False
        self._handle = loop.call_later(max(0.0, self._budget.remaining()), self._check)

    def _check(self) -> None:
        left = self._budget.remaining()
        if left > 0:
            self._handle = self._loop.call_later(left, self._check)
        else:
            self._expired = True
            self._task.cancel()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._handle.cancel()
        # Ours was the cancellation (and no one else's came meanwhile): the budget is spent.
        if self._expired and self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc
