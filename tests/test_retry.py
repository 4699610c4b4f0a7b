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
