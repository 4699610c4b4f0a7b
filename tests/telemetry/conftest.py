"""Fixtures for telemetry tests: a controllable clock, a sample factory, unique Redis key prefixes."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable

import pytest

from gateway.redisconn import connect
from gateway.telemetry.sample import AttemptSample, Outcome


class FakeClock:
    """A wall clock the test moves by hand."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


SampleFactory = Callable[..., AttemptSample]


def build_sample(
    key: str = "model/ep1",
    *,
    at: float,
    outcome: Outcome = Outcome.OK,
    ttft_ms: float | None = 400.0,
    ttfat_ms: float | None = None,
    decode_tps: float | None = 900.0,
    e2e_ms: float = 2000.0,
    input_tokens: int = 100,
    cached_input_tokens: int = 0,
    cache_write_input_tokens: int = 0,
    output_tokens: int = 50,
    reasoning_tokens: int = 0,
    cost_usd: float = 0.001,
) -> AttemptSample:
    """A sample that *finished* at time `at` (the time telemetry files it under)."""
    e2e_s = e2e_ms / 1000.0
    return AttemptSample(
        endpoint_key=key,
        started_at=at - e2e_s,
        outcome=outcome,
        status=200 if outcome == Outcome.OK else None,
        ttft_s=None if ttft_ms is None else ttft_ms / 1000.0,
        ttfat_s=(ttft_ms if ttfat_ms is None else ttfat_ms) / 1000.0 if ttft_ms is not None else None,
        decode_tps=decode_tps,
        e2e_s=e2e_s,
        input_tokens=input_tokens,
        cached_input_tokens=cached_input_tokens,
        cache_write_input_tokens=cache_write_input_tokens,
        output_tokens=output_tokens,
        reasoning_tokens=reasoning_tokens,
        cost_usd=cost_usd,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_sample() -> SampleFactory:
    return build_sample


@pytest.fixture
async def key_prefix(redis_url: str) -> AsyncIterator[str]:
    """A key prefix no other test uses; its keys (under the hash tag `{prefix}`) are deleted afterwards."""
    prefix = f"ur:test:{uuid.uuid4().hex[:10]}"
    yield prefix
    client = connect(redis_url, timeout_s=2.0)
    try:
        keys = [k async for k in client.scan_iter(match=f"{{{prefix}}}:*", count=1000)]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()
