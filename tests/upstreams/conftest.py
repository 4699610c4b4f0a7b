"""One simulator and one gateway for the native-upstream tests: the simulator is spoken to in
Anthropic Messages (`claude`, `claude-fast`), OpenAI Responses (`gpt`) and chat completions (`open`).

    a   claude (api: anthropic)
    r   gpt (api: openai-responses)
    c   claude-fast (anthropic, service_tier fast, tier fast), then open (chat, standard)
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

PROFILE = {"ttft_ms": 10, "ttft_jitter": 0, "tokens_per_second": 3000, "output_tokens": 8}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHAT_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "Weather in a city",
                                              "parameters": WEATHER}}
MESSAGES_TOOL = {"name": "get_weather", "description": "Weather in a city", "input_schema": WEATHER}
RESPONSES_TOOL = {"type": "function", "name": "get_weather", "description": "Weather in a city", "parameters": WEATHER}


@pytest.fixture(scope="package")
def sim() -> Iterator[SimProcess]:
    profiles = {"claude": {**PROFILE, "reasoning_tokens": 3}, "claude-fast": PROFILE, "gpt": PROFILE,
                "open": {**PROFILE, "tokens_per_second": 300}}
    with SimProcess(make_sim_config(profiles)) as process:
        yield process


@pytest.fixture(scope="package")
def gw(sim: SimProcess) -> Iterator[GatewayProcess]:
    catalogue = catalogue_for(sim, {
        "a": [{"sim": "claude", "api": "anthropic", "model": "claude-sonnet-4-6"}],
        "r": [{"sim": "gpt", "api": "openai-responses", "model": "gpt-5"}],
        "c": [{"sim": "claude-fast", "api": "anthropic", "tier": "fast", "service_tier": "fast",
               "model": "claude-opus-4-6", "price": {"input": 30.0, "output": 150.0}},
              {"sim": "open", "tier": "standard"}],
    }, gateway={"breaker_failures": 1000, "explore_rate": 0.0})
    catalogue["providers"]["claude"]["api_key_env"] = "CLAUDE_KEY"
    with GatewayProcess(catalogue, env={"CLAUDE_KEY": "sk-ant-test-0123456789abcdef"}) as process:
        yield process


@pytest.fixture(autouse=True)
def _fresh(sim: SimProcess) -> Iterator[None]:
    yield
    sim.reset(profiles=True)


def chat(gw: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0)


def claude(gw: GatewayProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0)


def sent(sim: SimProcess, endpoint: str, path: str) -> dict:  # type: ignore[type-arg]
    bodies = [r["body"] for r in sim.requests(endpoint) if r["path"] == path]
    assert bodies, f"{endpoint} received no {path} request"
    return bodies[-1]  # type: ignore[no-any-return]
