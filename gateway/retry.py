"""Retry policy, in one place: when one endpoint is tried again, how long to wait, and how often.

The treatment of each failure, before anything reached the client:

    failure                                   same endpoint again?            then
    no first token within the budget (hang)   never                           next candidate
    429, another candidate left               no (cools down until retry-after) next candidate
    429, none left, retry-after <= 1.5 s      once, after retry-after          the error
    500 / 502 / 504 / connection reset        once, after a short jittered backoff  next candidate
    503, connection refused                   no: the endpoint is unavailable  next candidate
    401 / 403                                 never (endpoint misconfigured)   next candidate
    400 context_length_exceeded               never                            a larger context, if any
    other 4xx                                 never                            the error, at once

Never more than two attempts at one endpoint, within 1.5 s. Retries on the same endpoint also draw on
a per-endpoint retry budget (as Envoy's and Finagle's): each request deposits `ratio` of a retry, so
a bad moment cannot multiply the load. Failing over to another candidate is not a retry. The backoff
is tenacity's; the dispatcher only asks `attempts()`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from tenacity import RetryCallState, wait_random_exponential

from gateway.errors import (
    GatewayError,
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamTimeout,
    UpstreamUnreachable,
)

MAX_ATTEMPTS_PER_ENDPOINT = 2
WINDOW_S = 1.5  # no more than two attempts at one endpoint within this
SHORT_RETRY_AFTER_S = 1.5
SAME_ENDPOINT_STATUSES = frozenset({500, 502, 504})
_backoff = wait_random_exponential(multiplier=0.05, max=0.4)


class RetryBudget:
    """Token bucket per endpoint: +`ratio` per request, -1 per retry, capped at `cap`."""

    def __init__(self, ratio: float = 0.2, cap: float = 10.0) -> None:
        self.ratio = ratio
        self.cap = cap
        self._tokens: dict[str, float] = {}

    def deposit(self, endpoint_key: str) -> None:
        self._tokens[endpoint_key] = min(self.cap, self._tokens.get(endpoint_key, 1.0) + self.ratio)

    def withdraw(self, endpoint_key: str) -> bool:
        tokens = self._tokens.get(endpoint_key, 1.0)
        if tokens < 1.0:
            return False
        self._tokens[endpoint_key] = tokens - 1.0
        return True


def worth_retrying_same(err: BaseException, has_alternatives: bool) -> bool:
    """Whether one failure at an endpoint calls for a second try at the same endpoint."""
    if not isinstance(err, UpstreamError) or isinstance(
        err, UpstreamTimeout | UpstreamUnreachable | UpstreamMisconfigured
    ):
        return False
    if err.status == 429:
        return (not has_alternatives and err.retry_after_s is not None
                and err.retry_after_s <= SHORT_RETRY_AFTER_S)
    return err.status in SAME_ENDPOINT_STATUSES


def _wait(err: BaseException, number: int) -> float:
    """Before the second try: the provider's retry-after on a 429, else a short jittered backoff."""
    if isinstance(err, UpstreamError) and err.status == 429 and err.retry_after_s is not None:
        return err.retry_after_s
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]  # the backoff reads attempt_number only
    state.attempt_number = number
    return _backoff(state)


class Attempt:
    """One try. `with attempt:` keeps the failure (an `Exception`) for `Attempts` to judge, as
    tenacity's AttemptManager does; cancellation and other BaseExceptions go straight through."""

    __slots__ = ("error",)

    def __init__(self) -> None:
        self.error: Exception | None = None

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        if isinstance(exc, Exception):
            self.error = exc
            return True
        return False


class Attempts:
    """The tries at one endpoint: the first; a second if the first failure calls for it
    (`worth_retrying_same`), the retry budget allows it and the window has not passed; then the last
    failure is raised. A try that does not raise ends the loop (the caller returns from it).

    Plain Python rather than tenacity's `AsyncRetrying`: that builds a call state, actions and
    closures for every request, ~5% of a request's CPU, for a second try that is rare."""

    __slots__ = ("_budget", "_current", "_endpoint_key", "_has_alternatives", "_number", "_on_retry", "_started")

    def __init__(self, endpoint_key: str, has_alternatives: bool, budget: RetryBudget,
                 on_retry: Callable[[GatewayError], None] | None) -> None:
        self._endpoint_key = endpoint_key
        self._has_alternatives = has_alternatives
        self._budget = budget
        self._on_retry = on_retry
        self._started = time.monotonic()
        self._number = 0
        self._current: Attempt | None = None

    def __aiter__(self) -> Attempts:
        return self

    async def __anext__(self) -> Attempt:
        previous = self._current
        if previous is not None:
            err = previous.error
            if err is None:
                raise StopAsyncIteration
            if not self._retry(err):
                raise err
            await asyncio.sleep(_wait(err, self._number))
        self._number += 1
        self._current = Attempt()
        return self._current

    def _retry(self, err: Exception) -> bool:
        if self._number >= MAX_ATTEMPTS_PER_ENDPOINT or time.monotonic() - self._started >= WINDOW_S:
            return False
        if not worth_retrying_same(err, self._has_alternatives) or not self._budget.withdraw(self._endpoint_key):
            return False
        if self._on_retry is not None and isinstance(err, GatewayError):
            self._on_retry(err)
        return True


def attempts(endpoint_key: str, has_alternatives: bool, budget: RetryBudget,
             on_retry: Callable[[GatewayError], None] | None = None) -> Attempts:
    """`async for attempt in attempts(...): with attempt: ...` tries one endpoint once or twice."""
    budget.deposit(endpoint_key)
    return Attempts(endpoint_key, has_alternatives, budget, on_retry)
