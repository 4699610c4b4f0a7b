"""The simulator speaks Anthropic Messages and OpenAI Responses: the official `anthropic` and `openai`
SDKs, pointed at it directly, parse everything it sends (plain, streamed, thinking and reasoning,
tool calls, usage with cache tokens, the reported speed / service tier, a silent downgrade, 529)."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from gateway.simulator.testing import SimFactory, SimProcess

PROFILE = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 5000, "output_tokens": 8, "model": "sim-model"}
TOOL = {"name": "get_weather", "description": "Weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HELLO = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def sim(module_sim_factory: SimFactory) -> SimProcess:
    return module_sim_factory({"a": PROFILE, "thinks": {**PROFILE, "reasoning_tokens": 4}})


@pytest.fixture(autouse=True)
def _fresh(sim: SimProcess) -> Iterator[None]:
    yield
    sim.reset(profiles=True)


def claude(sim: SimProcess, name: str = "a") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.base_url(name).removesuffix("/v1"), api_key="x", max_retries=0)


def gpt(sim: SimProcess, name: str = "a") -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url(name), api_key="x", max_retries=0)


def test_messages_plain_reports_usage_and_standard_speed(sim: SimProcess) -> None:
    message = claude(sim).messages.create(model="sim-model", max_tokens=5, system="Be brief.", messages=HELLO)  # type: ignore[arg-type]
    assert message.stop_reason == "max_tokens" and message.content[0].type == "text"
    assert len(message.content[0].text.split()) == 5
    assert message.usage.output_tokens == 5 and message.usage.input_tokens > 0
    assert message.usage.speed == "standard"


def test_messages_stream_with_thinking_signature_and_fast_speed(sim: SimProcess) -> None:
    with claude(sim, "thinks").messages.stream(model="sim-model", max_tokens=10, messages=HELLO,  # type: ignore[arg-type]
                                               extra_body={"speed": "fast"}) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    thinking, text = final.content
    assert thinking.type == "thinking" and len(thinking.thinking.split()) == 4 and thinking.signature
    assert text.type == "text" and len(text.text.split()) == 6
    assert final.usage.speed == "fast" and final.usage.output_tokens == 10


def test_messages_silent_downgrade_and_cache_tokens(sim: SimProcess) -> None:
    sim.patch("a", faults={"downgrade_to": "standard"})
    system = [{"type": "text", "text": "long context " * 50, "cache_control": {"type": "ephemeral"}}]
    first = claude(sim).messages.create(model="sim-model", max_tokens=3, system=system, messages=HELLO,  # type: ignore[arg-type]
                                        extra_body={"speed": "fast"})
    again = claude(sim).messages.create(model="sim-model", max_tokens=3, system=system, messages=HELLO,  # type: ignore[arg-type]
                                        extra_body={"speed": "fast"})
    assert first.usage.speed == "standard" and again.usage.speed == "standard"
    assert first.usage.cache_creation_input_tokens and not first.usage.cache_read_input_tokens
    assert again.usage.cache_read_input_tokens and not again.usage.cache_creation_input_tokens


def test_messages_streamed_tool_use(sim: SimProcess) -> None:
    with claude(sim).messages.stream(model="sim-model", max_tokens=64, messages=HELLO, tools=[TOOL]) as stream:  # type: ignore[arg-type, list-item]
        final = stream.get_final_message()
    [use] = final.content
    assert final.stop_reason == "tool_use" and use.type == "tool_use" and set(use.input) == {"city"}  # type: ignore[arg-type]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}
    second = claude(sim).messages.create(model="sim-model", max_tokens=4, tools=[TOOL],  # type: ignore[list-item]
                                         messages=[*HELLO, {"role": "assistant", "content": final.content}, result])  # type: ignore[list-item]
    assert second.content[0].type == "text"


def test_messages_529_overloaded(sim: SimProcess) -> None:
    sim.patch("a", faults={"error_rate": 1.0, "error_status": 529})
    with pytest.raises(anthropic.APIStatusError) as info:
        claude(sim).messages.create(model="sim-model", max_tokens=3, messages=HELLO)  # type: ignore[arg-type]
    assert info.value.status_code == 529
    assert info.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]


def test_responses_plain_with_service_tier(sim: SimProcess) -> None:
    response = gpt(sim).responses.create(model="sim-model", input="Say hello", max_output_tokens=6,
                                         service_tier="priority")
    assert response.status == "incomplete" and len(response.output_text.split()) == 6
    assert response.service_tier == "priority" and response.usage is not None and response.usage.output_tokens == 6


def test_responses_stream_with_encrypted_reasoning(sim: SimProcess) -> None:
    with gpt(sim, "thinks").responses.stream(model="sim-model", input="Say hello",
                                             include=["reasoning.encrypted_content"]) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and reasoning.encrypted_content and reasoning.summary[0].text
    assert message.type == "message" and len(final.output_text.split()) == 8
    assert final.service_tier == "default" and final.usage.output_tokens_details.reasoning_tokens == 4  # type: ignore[union-attr]


def test_responses_function_call_and_downgrade(sim: SimProcess) -> None:
    sim.patch("a", faults={"downgrade_to": "default"})
    tool = {"type": "function", "name": "get_weather", "parameters": TOOL["input_schema"]}
    with gpt(sim).responses.stream(model="sim-model", input="Weather?", tools=[tool],  # type: ignore[list-item]
                                   service_tier="priority") as stream:
        final = stream.get_final_response()
    [call] = final.output
    assert call.type == "function_call" and call.name == "get_weather" and "city" in call.arguments
    assert final.service_tier == "default"
    follow = gpt(sim).responses.create(model="sim-model", tools=[tool], input=[  # type: ignore[list-item]
        {"role": "user", "content": "Weather?"}, {"type": "function_call", "call_id": call.call_id,
                                                  "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert follow.output[0].type == "message" and follow.output_text
