"""Retry policy: which failures earn a second try at the same endpoint, and the retry budget."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from email.utils import formatdate

import httpx
import pytest

from gateway.errors import UpstreamError, UpstreamMisconfigured, UpstreamTimeout, UpstreamUnreachable
from gateway.retry import (
    RetryBudget,
    attempts,
    come_back_after,
    exceeds_context,
    model_cannot_take,
    mostly_works,
    rate_limit_reset,
    retry_after,
    worth_retrying_same,
)
from gateway.telemetry.stats import EndpointStats
from gateway.upstreams.limit_headers import duration_s, read


@pytest.mark.parametrize(("err", "expected"), [
    (UpstreamError("x", status=500), True),
    (UpstreamError("x", status=502), True),
    (UpstreamError("x", status=503), False),
    (UpstreamError("x", status=429, retry_after_s=0.5), False),  # never at once: see come_back_after
    (UpstreamError("x", status=400), False),
    (UpstreamTimeout("silent"), False),
    (UpstreamUnreachable("refused"), False),
    (UpstreamMisconfigured("key", 401), False),
])
def test_worth_retrying_same(err: UpstreamError, expected: bool) -> None:
    assert worth_retrying_same(err) is expected


@pytest.mark.parametrize(("wait", "max_wait", "left", "expected"), [
    (2.0, 5.0, 10.0, True),
    (30.0, 5.0, 10.0, False),  # longer than retry.max_wait_s
    (2.0, 5.0, 1.0, False),  # past the request's first-token budget or deadline
    (None, 5.0, 10.0, False),  # the 429 did not say when
])
def test_come_back_after(wait: float | None, max_wait: float, left: float, expected: bool) -> None:
    assert come_back_after(wait, "e", RetryBudget(), max_wait, left) is expected


def test_come_back_draws_on_the_retry_budget() -> None:
    budget = RetryBudget(ratio=0.0)
    assert come_back_after(1.0, "e", budget, 5.0, 10.0)
    assert not come_back_after(1.0, "e", budget, 5.0, 10.0)


def _upstream(status: int, code: str | None = None, message: str = "no", type_: str = "invalid_request_error"):
    return UpstreamError(message, status=status, body={"message": message, "type": type_, "code": code})


@pytest.mark.parametrize(("err", "context", "cannot_take"), [
    (_upstream(400, "context_length_exceeded"), True, True),
    (_upstream(400, None, "This model's maximum context length is 4096 tokens."), True, True),  # vLLM
    (_upstream(400, None, "the request exceeds the available context size", "exceed_context_size_error"),
     True, True),  # llama.cpp
    (_upstream(400, "unsupported_parameter", "Unsupported parameter: 'logprobs'"), False, True),
    (_upstream(400, "unsupported_value", "'messages[0].content' does not support image_url"), False, True),
    (_upstream(400, "content_policy_violation", "Your request was rejected by our safety system"), False, False),
    (_upstream(400, None, "Your prompt was flagged by our content management policy"), False, False),
    (_upstream(400, "invalid_value", "'temperature' must be a number"), False, False),  # malformed
    (_upstream(400, "missing_required_parameter", "Missing required parameter: 'messages'"), False, False),
    (_upstream(429, None, "context length"), False, False),
    (_upstream(500, None, "unsupported"), False, False),
])
def test_model_cannot_take(err: UpstreamError, context: bool, cannot_take: bool) -> None:
    assert exceeds_context(err) is context
    assert model_cannot_take(err) is cannot_take


def test_budget_limits_retries_to_a_share_of_requests() -> None:
    budget = RetryBudget(ratio=0.2, cap=10)
    granted = 0
    for _ in range(100):
        budget.deposit("e")
        granted += budget.withdraw("e")
    assert 20 <= granted <= 22  # ~20% of requests, plus the initial token


async def test_attempts_tries_twice_at_most() -> None:
    calls = []
    with pytest.raises(UpstreamError):
        async for attempt in attempts("e", budget=RetryBudget()):
            with attempt:
                calls.append(1)
                raise UpstreamError("boom", status=500)
    assert len(calls) == 2


async def test_attempts_stop_after_a_success_or_a_failure_not_worth_a_second_try() -> None:
    budget = RetryBudget()
    calls = []
    async for attempt in attempts("e", budget=budget):
        with attempt:
            calls.append(1)
    assert len(calls) == 1  # a try that does not raise ends the loop
    with pytest.raises(UpstreamError) as info:
        async for attempt in attempts("e", budget=budget):
            with attempt:
                calls.append(2)
                raise UpstreamError("unavailable", status=503)
    assert calls == [1, 2] and info.value.status == 503


async def test_a_retry_is_announced_and_drawn_from_the_budget() -> None:
    budget = RetryBudget(ratio=0.0)  # one initial token, none deposited
    seen: list[int] = []
    for expected_tries in (2, 1):  # the token pays for one retry; the next failure is final at once
        tries = 0
        with pytest.raises(UpstreamError):
            async for attempt in attempts("e", budget=budget,
                                          on_retry=lambda err: seen.append(err.status)):
                with attempt:
                    tries += 1
                    raise UpstreamError("boom", status=502)
        assert tries == expected_tries
    assert seen == [502]


def rate_limit_exhausted(headers: httpx.Headers) -> float | None:
    reported = read(headers)
    return None if reported is None else reported.exhausted_s()


def anthropic_limit_exhausted(headers: httpx.Headers) -> float | None:
    reported = read(headers, anthropic=True)
    return None if reported is None else reported.exhausted_s()


def test_rate_limit_headers_at_zero_mean_cool_down() -> None:
    assert duration_s("6m0s") == 360 and duration_s("250ms") == 0.25 and duration_s("2") == 2
    assert duration_s("soon") is None
    headers = httpx.Headers({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "1.5s"})
    assert rate_limit_exhausted(headers) == 1.5
    assert rate_limit_exhausted(httpx.Headers({"x-ratelimit-remaining-requests": "7"})) is None


def test_anthropic_rate_limit_headers_at_zero_mean_cool_down_until_the_reset() -> None:
    reset = datetime.fromtimestamp(time.time() + 30, UTC).isoformat().replace("+00:00", "Z")
    headers = httpx.Headers({"anthropic-ratelimit-requests-remaining": "12",
                             "anthropic-ratelimit-output-tokens-remaining": "0",
                             "anthropic-ratelimit-output-tokens-reset": reset})
    assert 25 < (anthropic_limit_exhausted(headers) or 0) <= 30
    assert anthropic_limit_exhausted(httpx.Headers({"anthropic-ratelimit-requests-remaining": "3"})) is None
    openai_style = httpx.Headers({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "2s"})
    assert anthropic_limit_exhausted(openai_style) == 2.0


def test_a_429_without_retry_after_comes_back_at_the_reset_of_the_limit_used_up() -> None:
    reset = datetime.fromtimestamp(time.time() + 3, UTC).isoformat().replace("+00:00", "Z")
    headers = httpx.Headers({"anthropic-ratelimit-tokens-remaining": "0", "anthropic-ratelimit-tokens-reset": reset})
    assert 2 < (rate_limit_reset(headers, read(headers, anthropic=True)) or 0) <= 3
    # retry-after, when given, is the provider's own word on it
    assert rate_limit_reset(httpx.Headers({**headers, "retry-after": "7"}), read(headers, anthropic=True)) == 7
    assert rate_limit_reset(httpx.Headers({}), None) is None


def test_retry_after_in_milliseconds_seconds_or_a_date() -> None:
    assert retry_after(httpx.Headers({"retry-after": "2", "retry-after-ms": "1500"})) == 1.5
    assert retry_after(httpx.Headers({"retry-after": "2"})) == 2.0
    in_ten = retry_after(httpx.Headers({"retry-after": formatdate(time.time() + 10, usegmt=True)}))
    assert in_ten is not None and 8 < in_ten <= 10
    assert retry_after(httpx.Headers({"retry-after": "whenever"})) is None
    assert retry_after(httpx.Headers({})) is None


def test_a_503_from_an_endpoint_that_mostly_works_is_tried_once_more() -> None:
    unavailable = UpstreamError("x", status=503)
    assert worth_retrying_same(unavailable, lambda: True) is True  # sporadic: as a 502
    assert worth_retrying_same(unavailable, lambda: False) is False
    assert worth_retrying_same(UpstreamError("x", status=429), lambda: True) is False  # capacity: never at once

    def stats(requests: int, errors: int, rate_limited: int = 0, cancelled: int = 0) -> EndpointStats:
        accountable = requests - cancelled
        failed = errors + rate_limited
        return EndpointStats(window_s=300, requests=requests, errors=failed, cancelled=cancelled,
                             error_rate=failed / accountable, rate_limited_rate=rate_limited / accountable)

    assert mostly_works(stats(20, 4)) is True  # one in five fails: a 503 is passing
    assert mostly_works(stats(20, 12)) is False  # most fail: it is unavailable
    assert mostly_works(stats(8, 1)) is False  # too little history to say
    assert mostly_works(stats(14, 0, cancelled=6)) is False  # cancelled attempts say nothing
    assert mostly_works(stats(20, 4, rate_limited=10)) is True  # 429s are capacity, not failures


async def test_attempts_ask_whether_a_503_is_sporadic_only_after_one() -> None:
    asked: list[str] = []

    def sporadic(key: str) -> bool:
        asked.append(key)
        return True

    tries = 0
    async for attempt in attempts("e", budget=RetryBudget(), sporadic=sporadic):
        with attempt:
            tries += 1
            if tries == 1:
                raise UpstreamError("unavailable", status=503)
    assert tries == 2 and asked == ["e"]
