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
a bad moment cannot multiply the load. Failing over to another candidate is not a retry. The waits
and stops are tenacity's; the dispatcher only asks `attempts()`.
"""

from __future__ import annotations

from collections.abc import Callable

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

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


def _wait(state: RetryCallState) -> float:
    outcome = state.outcome
    err = outcome.exception() if outcome is not None else None
    if isinstance(err, UpstreamError) and err.status == 429 and err.retry_after_s is not None:
        return err.retry_after_s
    return _backoff(state)


def attempts(endpoint_key: str, has_alternatives: bool, budget: RetryBudget,
             on_retry: Callable[[GatewayError], None] | None = None) -> AsyncRetrying:
    """`async for attempt in attempts(...): with attempt: ...` tries one endpoint once or twice."""
    budget.deposit(endpoint_key)
    failures = [0]

    def should_retry(err: BaseException) -> bool:
        failures[0] += 1
        # tenacity asks before it checks `stop`: answer no for the last attempt, so no budget is spent
        # and no retry counted for a retry that will not happen.
        if failures[0] >= MAX_ATTEMPTS_PER_ENDPOINT:
            return False
        if not worth_retrying_same(err, has_alternatives) or not budget.withdraw(endpoint_key):
            return False
        if on_retry is not None and isinstance(err, GatewayError):
            on_retry(err)
        return True

    return AsyncRetrying(
        stop=stop_after_attempt(MAX_ATTEMPTS_PER_ENDPOINT) | stop_after_delay(WINDOW_S),
        wait=_wait,
        retry=retry_if_exception(should_retry),
        reraise=True,
    )
