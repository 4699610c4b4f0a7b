"""One simulator and one gateway for the native-upstream tests: the simulator is spoken to in
Anthropic Messages (`claude`, `claude-fast`), OpenAI Responses (`gpt`) and chat completions (`open`).

    a   claude (api: anthropic)
    r   gpt (api: openai-responses)
    c   claude-fast (anthropic, service_tier fast, tier fast), then open (chat, standard)
    s   claude-fast's model at Anthropic's standard tier (its price)
    p   gpt at OpenAI's priority tier (r is its default tier)
    o   open at service_tier flex (chat completions)
    w   claude with prompt-cache prices
    d   claude-down (anthropic fast, for demotion after silent downgrades), then open
    l   claude-limited (anthropic, 2 requests a minute, with anthropic-ratelimit-* headers), then open
    q   claude-paced (anthropic, 4 requests a minute, no rate_limits in the catalogue)
    h   open-paced (chat, 4 requests a minute with x-ratelimit-* headers, no rate_limits)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import anthropic
import httpx
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
                "open": {**PROFILE, "tokens_per_second": 300},
                "claude-limited": {**PROFILE, "requests_per_minute": 2}, "claude-down": PROFILE,
                # Made to fail by test_fallbacks.py: its own, so the package's other tests never see its circuit open.
                "claude-fails": PROFILE,
                "claude-paced": {**PROFILE, "requests_per_minute": 4, "tokens_per_minute": 100_000},
                "open-paced": {**PROFILE, "requests_per_minute": 4, "tokens_per_minute": 100_000}}
    with SimProcess(make_sim_config(profiles)) as process:
        yield process


@pytest.fixture(scope="package")
def gw(sim: SimProcess) -> Iterator[GatewayProcess]:
    catalogue = catalogue_for(sim, {
        "a": [{"sim": "claude", "api": "anthropic", "model": "claude-sonnet-4-6"}],
        "af": [{"sim": "claude-fails", "api": "anthropic", "model": "claude-sonnet-4-6"}],
        "r": [{"sim": "gpt", "api": "openai-responses", "model": "gpt-5", "price": {"input": 1.25, "output": 10.0}}],
        # OpenAI's priority tier of the same provider and model: "r" above is its default tier.
        "p": [{"sim": "gpt", "api": "openai-responses", "model": "gpt-5", "id": "gpt-priority", "tier": "fast",
               "service_tier": "priority", "price": {"input": 2.5, "output": 20.0}}],
        # Anthropic's standard tier of claude-fast's model: what a silent downgrade is charged at.
        "s": [{"sim": "claude-fast", "api": "anthropic", "model": "claude-opus-4-6", "id": "claude-std",
               "price": {"input": 5.0, "output": 25.0}}],
        "o": [{"sim": "open", "service_tier": "flex", "id": "open-flex"}],
        "d": [{"sim": "claude-down", "api": "anthropic", "tier": "fast", "service_tier": "fast"},
              {"sim": "open", "tier": "standard"}],
        "l": [{"sim": "claude-limited", "api": "anthropic", "tier": "fast"}, {"sim": "open", "tier": "standard"}],
        # No rate_limits: the gateway learns them from the answers' headers.
        "q": [{"sim": "claude-paced", "api": "anthropic"}],
        "h": [{"sim": "open-paced"}],
        # Prompt-cache prices: reads, 5-minute and 1-hour writes.
        "w": [{"sim": "claude", "api": "anthropic", "model": "claude-haiku-4-5", "id": "claude-cache",
               "price": {"input": 1.0, "cached_input": 0.1, "cache_write": 1.25, "cache_write_1h": 2.0,
                         "output": 5.0}}],
        "c": [{"sim": "claude-fast", "api": "anthropic", "tier": "fast", "service_tier": "fast",
               "model": "claude-opus-4-6", "price": {"input": 30.0, "output": 150.0}},
              {"sim": "open", "tier": "standard"}],
    }, gateway={"breaker_failures": 1000, "explore_rate": 0.0})
    catalogue["providers"]["claude"]["api_key_env"] = "CLAUDE_KEY"
    with GatewayProcess(catalogue, env={"CLAUDE_KEY": "sk-ant-test-0123456789abcdef"}) as process:
        yield process


@pytest.fixture(autouse=True)
def _fresh(request: pytest.FixtureRequest) -> Iterator[None]:
    # Only a test that uses the simulator starts it and gets it reset: the unit tests of the shared
    # plumbing in this folder (client, stream, sse, ...) need neither.
    sim: SimProcess | None = request.getfixturevalue("sim") if "sim" in request.fixturenames else None
    yield
    if sim is not None:
        sim.reset(profiles=True)


def chat(gw: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.base_url, api_key="x", max_retries=0)


def claude(gw: GatewayProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key="x", max_retries=0)


def messages_tool_round(c: anthropic.Anthropic, model: str, max_tokens: int) -> anthropic.types.Message:
    """A Messages client's tool loop: the model calls get_weather, the client answers it, and the
    model's next message (returned) follows."""
    hello = [{"role": "user", "content": "Say hello"}]
    first = c.messages.create(model=model, max_tokens=64, messages=hello, tools=[MESSAGES_TOOL])  # type: ignore[arg-type, list-item]
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert first.stop_reason == "tool_use" and set(use.input) == {"city"}  # type: ignore[arg-type]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}
    return c.messages.create(model=model, max_tokens=max_tokens, tools=[MESSAGES_TOOL],  # type: ignore[list-item]
                             messages=[*hello, {"role": "assistant", "content": first.content}, result])  # type: ignore[list-item]


def sent(sim: SimProcess, endpoint: str, path: str) -> dict:  # type: ignore[type-arg]
    bodies = [r["body"] for r in sim.requests(endpoint) if r["path"] == path]
    assert bodies, f"{endpoint} received no {path} request"
    return bodies[-1]  # type: ignore[no-any-return]


def access_lines(gw: GatewayProcess, request_ids: set[str]) -> dict[str, dict]:  # type: ignore[type-arg]
    """The access-log lines of `request_ids` (written by a background thread: waited for)."""
    deadline = time.monotonic() + 5
    while True:
        found = {}
        for line in gw.logs().splitlines():
            if line.startswith("{") and "request_id" in line:
                entry = json.loads(line)
                if entry.get("request_id") in request_ids:
                    found[entry["request_id"]] = entry
        if len(found) == len(request_ids) or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def metric(gw: GatewayProcess, name: str, **labels: str) -> float:
    """A counter's value for these labels on the gateway's /metrics (0 before it first counts)."""
    for line in httpx.get(f"{gw.url}/metrics").text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0
