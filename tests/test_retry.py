"""Retry policy: which failures earn a second try at the same endpoint, and the retry budget."""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamError, UpstreamMisconfigured, UpstreamTimeout, UpstreamUnreachable
from gateway.retry import RetryBudget, attempts, worth_retrying_same


@pytest.mark.parametrize(("err", "alternatives", "expected"), [
    (UpstreamError("x", status=500), True, True),
    (UpstreamError("x", status=502), True, True),
    (UpstreamError("x", status=503), True, False),
    (UpstreamError("x", status=429, retry_after_s=0.5), True, False),
    (UpstreamError("x", status=429, retry_after_s=0.5), False, True),
    (UpstreamError("x", status=429, retry_after_s=5), False, False),
    (UpstreamError("x", status=400), False, False),
    (UpstreamTimeout("silent"), False, False),
    (UpstreamUnreachable("refused"), False, False),
    (UpstreamMisconfigured("key", 401), False, False),
])
def test_worth_retrying_same(err: UpstreamError, alternatives: bool, expected: bool) -> None:
    assert worth_retrying_same(err, alternatives) is expected


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
        async for attempt in attempts("e", has_alternatives=True, budget=RetryBudget()):
            with attempt:
                calls.append(1)
                raise UpstreamError("boom", status=500)
    assert len(calls) == 2


async def test_attempts_stop_after_a_success_or_a_failure_not_worth_a_second_try() -> None:
    budget = RetryBudget()
    calls = []
    async for attempt in attempts("e", has_alternatives=True, budget=budget):
        with attempt:
            calls.append(1)
    assert len(calls) == 1  # a try that does not raise ends the loop
    with pytest.raises(UpstreamError) as info:
        async for attempt in attempts("e", has_alternatives=True, budget=budget):
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
            async for attempt in attempts("e", has_alternatives=True, budget=budget,
                                          on_retry=lambda err: seen.append(err.status)):
                with attempt:
                    tries += 1
                    raise UpstreamError("boom", status=502)
        assert tries == expected_tries
    assert seen == [502]
