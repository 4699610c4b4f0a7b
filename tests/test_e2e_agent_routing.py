"""End to end: agent traffic routed by prompt size, prefill speed and prompt caches (issue 31).

A gateway process in front of the simulator, driven by the official openai SDK and `/v1/route`: a
fast tier limited to small cold prompts is filtered out for a large one (the reason in the plan); an
agent session stays on the endpoint holding its prompt cache, `/v1/route` says why, and it moves when
that endpoint fails.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

SYSTEM = {"role": "system", "content": "You are a coding agent. " + "Tool catalogue. " * 2_500}  # ~10k tokens


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    common = {"ttft_jitter": 0.0, "slowdown_per_user": 0.0, "output_tokens": 8}
    config = make_sim_config({
        "gpu": {**common, "ttft_ms": 30, "tokens_per_second": 400, "prefill_tokens_per_second": 40_000,
                "cached_prefill_tokens_per_second": 2_000_000},
        "tier8k": {**common, "ttft_ms": 10, "tokens_per_second": 2000, "prefill_tokens_per_second": 200_000},
    })
    with SimProcess(config) as process:
        yield process


def route(gw: GatewayProcess, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{gw.base_url}/route", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_fast_tier_limited_to_small_cold_prompts_is_filtered_out_for_a_large_one(sim: SimProcess) -> None:
    catalogue = catalogue_for(sim, {"m": [
        {"sim": "gpu", "id": "gpu", "price": {"input": 1.0, "output": 2.0}},
        {"sim": "tier8k", "id": "tier8k", "price": {"input": 1.0, "output": 2.0}, "max_uncached_input_tokens": 8192},
    ]})
    with GatewayProcess(catalogue) as gw:
        small = {"model": "m", "messages": [{"role": "user", "content": "fix the bug"}],
                 "provider": {"only": ["tier8k"]}}
        assert [c["id"] for c in route(gw, small)["candidates"]] == ["tier8k"]
        large = {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "fix the bug"}]}
        plan = route(gw, large)
        assert [c["id"] for c in plan["candidates"]] == ["gpu"]
        [excluded] = plan["excluded"]
        assert excluded["reason"].startswith("cold prompt ~") and "max_uncached_input_tokens 8192" in excluded["reason"]
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused")
        answer = client.chat.completions.with_raw_response.create(model="m", messages=large["messages"])
        assert answer.headers["x-ultraroute-endpoint"] == "gpu"


def test_an_agent_session_stays_on_its_cache_holder_explained_and_moves_when_it_fails(sim: SimProcess) -> None:
    catalogue = catalogue_for(sim, {"m": [
        {"sim": "gpu", "id": "gpu", "price": {"input": 1.0, "cached_input": 0.1, "output": 2.0}},
        {"sim": "tier8k", "id": "other", "price": {"input": 1.0, "cached_input": 0.1, "output": 2.0}},
    ]})
    sim.reset(profiles=True)  # empty prompt caches
    with GatewayProcess(catalogue) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
        messages: list[dict[str, Any]] = [SYSTEM]
        served, cached = [], []
        for turn in range(5):
            messages.append({"role": "user", "content": f"step {turn}: " + "tool output " * 300})
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=messages, extra_body={"prompt_cache_key": "agent-7"})  # type: ignore[arg-type]
            answer = raw.parse()
            served.append(raw.headers["x-ultraroute-endpoint"])
            cached.append(answer.usage.prompt_tokens_details.cached_tokens)  # type: ignore[union-attr]
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        assert len(set(served)) == 1, served  # every turn on the endpoint holding the session's cache
        assert cached[0] == 0 and all(c > 10_000 for c in cached[1:]), cached
        holder = served[0]
        plan = route(gw, {"model": "m", "messages": messages, "prompt_cache_key": "agent-7"})
        first = plan["candidates"][0]
        assert first["id"] == holder and first["notes"][0] == "sticky"
        assert first["notes"][1].startswith("stays: cache saves ~") and "s prefill" in first["notes"][1]
        sim.patch({"gpu": "gpu", "other": "tier8k"}[holder], faults={"error_rate": 1.0})
        try:
            messages.append({"role": "user", "content": "next step"})
            raw = client.chat.completions.with_raw_response.create(
                model="m", messages=messages, extra_body={"prompt_cache_key": "agent-7"})  # type: ignore[arg-type]
            assert raw.headers["x-ultraroute-endpoint"] != holder  # the holder failed: the turn moved
        finally:
            sim.reset(profiles=True)


def test_a_prompt_above_long_context_is_billed_at_its_rates(sim: SimProcess) -> None:
    price = {"input": 1.0, "output": 2.0, "long_context": {"above_tokens": 5_000, "input": 10.0, "output": 20.0}}
    catalogue = catalogue_for(sim, {"m": [{"sim": "gpu", "id": "gpu", "price": price}]})
    with GatewayProcess(catalogue) as gw:
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused")
        small = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        large = client.chat.completions.create(model="m", messages=[SYSTEM, {"role": "user", "content": "go"}])
        plan = route(gw, {"model": "m", "messages": [SYSTEM, {"role": "user", "content": "go"}], "max_tokens": 8})
        # A view holding both attempts: a sample may land just after its answer, and the stats shown are
        # recomputed at most every 250 ms.
        deadline = time.monotonic() + 10
        while (stats := httpx.get(f"{gw.base_url}/endpoints").json()["data"][0]["stats"])["requests"] < 2:
            assert time.monotonic() < deadline, stats
            time.sleep(0.05)
        spent = stats["cost_usd"]
    assert small.usage is not None and large.usage is not None and large.usage.prompt_tokens > 5_000
    expected = (small.usage.prompt_tokens * 1.0 + 8 * 2.0 + large.usage.prompt_tokens * 10.0 + 8 * 20.0) / 1e6
    assert spent == pytest.approx(expected, rel=1e-3)
    # The estimate the router ranks by uses the same rates (~4 characters a token).
    assert plan["candidates"][0]["figures"]["cost_usd"] == pytest.approx(large.usage.prompt_tokens * 10e-6, rel=0.1)
