"""Retry policy, in one place: when one endpoint is tried again, how long to wait, and how often; and
which failures another endpoint or model may not repeat.

The treatment of each failure, before anything reached the client:

    failure                                   same endpoint again?              then
    no first token within the budget (hang)   never                             next candidate
    429                                       not at once (cools down)          next candidate of the model;
                                              see "come back" below             then the next model
    500 / 502 / 504 / connection reset        once, after a short jittered backoff  next candidate
    503                                       no: the endpoint is unavailable --  next candidate
                                              unless it mostly works (below):
                                              then as a 502
    connection refused                        no: the endpoint is unavailable   next candidate
    401 / 403                                 never (endpoint misconfigured)    next candidate
    4xx "this model cannot take it":          never                             next candidate, any model
      context length (only larger windows),     (`exceeds_context`, `model_cannot_take`)
      an unsupported parameter or content
    4xx content policy, malformed request     never                             the error, at once

A 503 from an endpoint that mostly works (`mostly_works`: under `SPORADIC` of at least `HISTORY`
recent attempts failed) is a passing failure, as a 502 is: tried once more there, since the plan put
that endpoint first and its next candidate is slower -- a tier that fails one request in five at
random, with only slow capacity behind it, served a fifth of its requests at the slow tier's speed.

Never more than two attempts at one endpoint within 1.5 s. Retries on the same endpoint also draw on
a per-endpoint retry budget (as Envoy's and Finagle's): each request deposits `ratio` of a retry, so
a bad moment cannot multiply the load. Failing over to another candidate is not a retry. The backoff
is tenacity's; the dispatcher only asks `attempts()`.

Come back: another model is another answer. Before the dispatcher leaves a model for the next one in
`models`, a 429 of that model that said to come back soon (`retry-after` / `retry-after-ms`, or the
cool-down it started) is waited for and its endpoint tried once more, if the wait is within
`retry.max_wait_s`, the request's first-token budget and its deadline (`come_back_after`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

from tenacity import RetryCallState, wait_random_exponential

from gateway.errors import (
    GatewayError,
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from gateway.routing.figures import failure_rate
from gateway.telemetry.stats import EndpointStats

MAX_ATTEMPTS_PER_ENDPOINT = 2
WINDOW_S = 1.5  # no more than two attempts at one endpoint within this
SAME_ENDPOINT_STATUSES = frozenset({500, 502, 504})
SPORADIC = 0.5  # an endpoint that failed under this share of its recent attempts mostly works ...
HISTORY = 10  # ... judged over at least this many
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


def mostly_works(stats: EndpointStats) -> bool:
    """Whether an endpoint's recent attempts (every replica's) say it mostly works: a 503 from it is
    sporadic. 429s are capacity, not failures (routing/figures.py `failure_rate`)."""
    accountable = stats.requests - stats.cancelled - stats.client_errors
    return accountable >= HISTORY and failure_rate(stats) < SPORADIC


def worth_retrying_same(err: BaseException, sporadic: Callable[[], bool] | None = None) -> bool:
    """Whether one failure at an endpoint calls for a second try at the same endpoint, at once.
    `sporadic`: asked on a 503, whether the endpoint mostly works (`mostly_works`)."""
    if not isinstance(err, UpstreamError) or isinstance(
        err, UpstreamTimeout | UpstreamUnreachable | UpstreamMisconfigured
    ):
        return False
    if err.status == 503:
        return sporadic is not None and sporadic()
    return err.status in SAME_ENDPOINT_STATUSES


def _wait(number: int) -> float:
    """Before the second try: a short jittered backoff (a 429 is never retried at once)."""
    state = RetryCallState(None, None, (), {})  # type: ignore[arg-type]  # the backoff reads attempt_number only
    state.attempt_number = number
    return _backoff(state)


# -- what a provider said about when to come back --------------------------------------------
def duration_s(text: str) -> float | None:
    """OpenAI's reset format ("1s", "6m0s", "250ms") or plain seconds."""
    total, number = 0.0, ""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in units or not number:
            return None
        total += float(number) * units[unit]
        number = ""
        i += len(unit)
    return total + float(number) if number else total


def rate_limit_exhausted(headers: Mapping[str, str]) -> float | None:
    """Seconds until a provider's rate limit resets, when it says none is left (`x-ratelimit-*`)."""
    for kind in ("requests", "tokens"):
        if headers.get(f"x-ratelimit-remaining-{kind}") == "0":
            return duration_s(headers.get(f"x-ratelimit-reset-{kind}", "1s")) or 1.0
    return None


# Each Anthropic limit's (remaining, reset) headers: named once, read on every translated stream's answer.
ANTHROPIC_LIMITS = tuple((f"anthropic-ratelimit-{kind}-remaining", f"anthropic-ratelimit-{kind}-reset")
                         for kind in ("requests", "tokens", "input-tokens", "output-tokens"))


def anthropic_limit_exhausted(headers: Mapping[str, str]) -> float | None:
    """Seconds until an Anthropic rate limit resets, when it says none is left
    (`anthropic-ratelimit-<kind>-remaining: 0`, its `-reset` an RFC 3339 time); else OpenAI's
    `x-ratelimit-*`, which Anthropic-compatible hosts may send instead."""
    for remaining, reset_at in ANTHROPIC_LIMITS:
        if headers.get(remaining) == "0":
            reset = headers.get(reset_at, "")
            with contextlib.suppress(ValueError):
                return max(0.0, datetime.fromisoformat(reset.replace("Z", "+00:00")).timestamp() - time.time()) or 1.0
            return retry_after(headers) or 1.0
    return rate_limit_exhausted(headers)


def retry_after(headers: Mapping[str, str]) -> float | None:
    """`retry-after-ms` (OpenAI's, more precise) or `retry-after` in seconds or as an HTTP date."""
    with contextlib.suppress(ValueError):
        if (ms := headers.get("retry-after-ms")) is not None:
            return max(0.0, float(ms) / 1000)
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def come_back_after(wait_s: float | None, endpoint_key: str, budget: RetryBudget, max_wait_s: float,
                    time_left_s: float) -> bool:
    """Whether to wait `wait_s` (a 429's retry-after, or what is left of a cool-down) and try that
    endpoint once more before leaving its model. Draws on the retry budget."""
    if wait_s is None or wait_s > min(max_wait_s, time_left_s):
        return False
    return budget.withdraw(endpoint_key)


def rate_limit_wait(err: GatewayError) -> float | None:
    """How long a 429 said to wait; None for any other failure or a 429 that did not say."""
    if isinstance(err, UpstreamError) and err.status == 429:
        return err.retry_after_s
    return None


# -- which 4xx another endpoint or model may not repeat ------------------------------------------
# From the status plus OpenAI's error `code`/`type` and, for servers that set neither (vLLM,
# llama.cpp, Anthropic-style messages), words of the message.
_POLICY_CODES = frozenset({"content_policy_violation", "content_filter", "moderation_blocked",
                           "safety_violation", "invalid_prompt"})
_POLICY_WORDS = ("content policy", "content management policy", "safety system", "usage policies",
                 "flagged by", "moderation")
_CONTEXT_CODES = frozenset({"context_length_exceeded", "exceed_context_size_error", "string_above_max_length"})
_CONTEXT_WORDS = ("maximum context length", "context length", "context window", "context size",
                  "prompt is too long", "too many input tokens", "input is too long")
_UNSUPPORTED_CODES = frozenset({"unsupported_parameter", "unsupported_value", "unsupported_content_type",
                                "unsupported_content", "model_not_supported", "image_not_supported"})
_UNSUPPORTED_WORDS = ("not supported", "unsupported", "does not support", "not a multimodal",
                      "image input is not", "images are not")
_MODEL_STATUSES = frozenset({400, 404, 413, 422})


def _fields(err: GatewayError) -> tuple[str, str, str]:
    return str(err.code or "").lower(), str(err.type or "").lower(), err.message.lower()


def refused_content(err: GatewayError) -> bool:
    """A content-policy rejection: any other model would be asked the same; never moved on."""
    code, type_, message = _fields(err)
    return (code in _POLICY_CODES or type_ in _POLICY_CODES
            or (400 <= err.status < 500 and any(w in message for w in _POLICY_WORDS)))


def exceeds_context(err: GatewayError) -> bool:
    """The prompt is too long for this endpoint's context window."""
    if not isinstance(err, UpstreamError) or err.status not in _MODEL_STATUSES or refused_content(err):
        return False
    code, type_, message = _fields(err)
    return code in _CONTEXT_CODES or type_ in _CONTEXT_CODES or any(w in message for w in _CONTEXT_WORDS)


def model_cannot_take(err: GatewayError) -> bool:
    """"This model cannot take this request" (context length, an unsupported parameter or content
    type): the next candidate, of this model or the next in `models`, may. Not a malformed request,
    not a content-policy rejection."""
    if exceeds_context(err):
        return True
    if not isinstance(err, UpstreamError) or err.status not in _MODEL_STATUSES or refused_content(err):
        return False
    code, type_, message = _fields(err)
    return code in _UNSUPPORTED_CODES or type_ in _UNSUPPORTED_CODES or any(w in message for w in _UNSUPPORTED_WORDS)


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

    __slots__ = ("_budget", "_current", "_endpoint_key", "_number", "_on_retry", "_sporadic", "_started")

    def __init__(self, endpoint_key: str, budget: RetryBudget,
                 on_retry: Callable[[GatewayError], None] | None,
                 sporadic: Callable[[str], bool] | None = None) -> None:
        self._endpoint_key = endpoint_key
        self._budget = budget
        self._on_retry = on_retry
        self._sporadic = sporadic
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
            await asyncio.sleep(_wait(self._number))
        self._number += 1
        self._current = Attempt()
        return self._current

    def _retry(self, err: Exception) -> bool:
        if self._number >= MAX_ATTEMPTS_PER_ENDPOINT or time.monotonic() - self._started >= WINDOW_S:
            return False
        sporadic = None if self._sporadic is None else functools.partial(self._sporadic, self._endpoint_key)
        if not worth_retrying_same(err, sporadic) or not self._budget.withdraw(self._endpoint_key):
            return False
        if self._on_retry is not None and isinstance(err, GatewayError):
            self._on_retry(err)
        return True


def attempts(endpoint_key: str, budget: RetryBudget, on_retry: Callable[[GatewayError], None] | None = None,
             sporadic: Callable[[str], bool] | None = None) -> Attempts:
    """`async for attempt in attempts(...): with attempt: ...` tries one endpoint once or twice.
    `sporadic(endpoint_key)`: asked after a 503, whether the endpoint mostly works (`mostly_works`)."""
    budget.deposit(endpoint_key)
    return Attempts(endpoint_key, budget, on_retry, sporadic)
