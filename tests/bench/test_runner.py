"""End to end against simulated endpoints with known profiles: every figure within 10% of the profile.

Two endpoints, no TTFT jitter, the simulator's default slowdown per user (0.0092): per-user rate at
concurrency c is tps / (1 + 0.0092 (c - 1)); `max_tokens` makes every answer exactly N tokens.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator

import pytest

from gateway.bench.compare import compare
from gateway.bench.cost import Pricing
from gateway.bench.metrics import summarize
from gateway.bench.models import LevelStats, RequestResult
from gateway.bench.prompts import load_prompts
from gateway.bench.runner import RunSettings, request_body, run_bench
from gateway.bench.targets import Target
from gateway.simulator.testing import SimProcess, make_sim_config

N_TOKENS = 100
SLOWDOWN = 0.0092
PROFILES = {
    "fast": {"ttft_ms": 200, "tokens_per_second": 400, "reasoning_tokens": 20},
    "slow": {"ttft_ms": 600, "tokens_per_second": 100, "reasoning_tokens": 0},
}
HOURLY = 36.0  # USD/hour for "slow": its cost per 1M output tokens follows its measured throughput


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    common = {"ttft_jitter": 0, "slowdown_per_user": SLOWDOWN, "model": "m"}
    config = make_sim_config({name: {**profile, **common} for name, profile in PROFILES.items()})
    with SimProcess(config) as process:
        yield process


class Progress:
    def __init__(self) -> None:
        self.levels: list[tuple[str, int, int]] = []
        self.results: list[RequestResult] = []

    def start_level(self, target: str, level: int, requests: int) -> None:
        self.levels.append((target, level, requests))

    def advance(self, result: RequestResult) -> None:
        self.results.append(result)


def _measure(sim: SimProcess) -> tuple[list[LevelStats], Progress]:
    targets = [
        Target("fast", sim.base_url("fast"), "m", pricing=Pricing(input=2.4, output=9.6)),
        Target("slow", sim.base_url("slow"), "m", pricing=Pricing(hourly_cost=HOURLY)),
    ]
    progress = Progress()
    settings = RunSettings(levels=(1, 4), requests=2, max_tokens=N_TOKENS, timeout_s=30)
    runs = asyncio.run(run_bench(targets, load_prompts(), settings, progress))
    pricing = {t.name: t.pricing for t in targets}
    return [summarize(r, pricing[r.target]) for r in runs], progress


@pytest.fixture(scope="module")
def measured(sim: SimProcess) -> tuple[list[LevelStats], Progress]:
    first = _measure(sim)
    if not any(misses(s) for s in first[0]):
        return first
    # The machine is shared: another process can take the CPU for tens of milliseconds, which is
    # 10% of a 0.25 s decode. Measure once more; a real error (a wrong formula) fails both times.
    return _measure(sim)


def expected(name: str, level: int) -> dict[str, float]:
    profile = PROFILES[name]
    rate = profile["tokens_per_second"] / (1 + SLOWDOWN * (level - 1))
    ttft = profile["ttft_ms"] / 1000
    e2e = ttft + (N_TOKENS - 1) / rate  # token i is due at first + i / rate
    aggregate = level * N_TOKENS / e2e  # requests = max(2, level): whole waves of `level` streams
    return {
        "decode": rate,
        "ttft_ms": ttft * 1000,
        # Reasoning tokens come first: the first answer token is token number `reasoning_tokens`.
        "answer_ms": (ttft + profile["reasoning_tokens"] / rate) * 1000,
        "e2e_ms": e2e * 1000,
        "aggregate": aggregate,
        "cost": 9.6 if name == "fast" else HOURLY / (aggregate * 3600) * 1e6,
    }


FIGURES = {  # LevelStats field -> key of expected()
    "decode_tps_p25": "decode", "decode_tps_p50": "decode",
    "ttft_ms_p50": "ttft_ms", "ttft_ms_p95": "ttft_ms",
    "answer_ms_p50": "answer_ms", "answer_ms_p95": "answer_ms",
    "e2e_ms_p50": "e2e_ms", "e2e_ms_p95": "e2e_ms",
    "aggregate_tps": "aggregate", "cost_per_1m_output": "cost",
}


def misses(stats: LevelStats) -> list[str]:
    """Every figure of the row that is not within 10% of the profile, described."""
    want = expected(stats.target, stats.level)
    out = []
    for field, key in FIGURES.items():
        value = getattr(stats, field)
        if value is None or abs(value / want[key] - 1) > 0.10:
            out.append(f"{stats.target} c={stats.level} {field}: {value} vs {want[key]:.1f}")
    return out


@pytest.mark.parametrize("name", ["fast", "slow"])
@pytest.mark.parametrize("level", [1, 4])
def test_every_figure_within_10_percent_of_the_profile(
    measured: tuple[list[LevelStats], Progress], name: str, level: int
) -> None:
    stats = next(s for s in measured[0] if (s.target, s.level) == (name, level))
    assert stats.requests == max(2, level) and stats.errors == 0 and stats.error_rate == 0.0
    assert stats.output_tokens == stats.requests * N_TOKENS
    assert stats.pricing == ("per_token" if name == "fast" else "hourly")
    assert misses(stats) == []


def test_compare_sees_the_profiles_ratio(measured: tuple[list[LevelStats], Progress]) -> None:
    comparison = compare(measured[0], "fast", "slow")
    for row in comparison.levels:
        assert row.speed_x == pytest.approx(4.0, rel=0.10)
    assert re.match(r"fast is [34]\.\dx(-[34]\.\dx)? as fast per user as slow at ", comparison.verdict)


def test_level_major_order_and_progress(measured: tuple[list[LevelStats], Progress]) -> None:
    progress = measured[1]
    assert progress.levels == [("fast", 1, 2), ("slow", 1, 2), ("fast", 4, 4), ("slow", 4, 4)]
    assert len(progress.results) == 12 and all(r.ok and r.usage_reported for r in progress.results)
    # Request i of a level gets prompt i mod len(prompts); indexes of a level are 0..n-1, each once.
    for target, level, n in progress.levels:
        indexes = sorted(r.index for r in progress.results if (r.target, r.level) == (target, level))
        assert indexes == list(range(n))


def test_request_body_carries_stream_usage_max_tokens_and_target_fields() -> None:
    import orjson

    target = Target("t", "http://x/v1", "m", body={"speed": "fast", "max_tokens": 7})
    prompt = load_prompts()[0]
    body = orjson.loads(request_body(target, prompt, 100))
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["messages"] == list(prompt.messages)
    assert body["speed"] == "fast" and body["max_tokens"] == 7  # the target's own fields win
