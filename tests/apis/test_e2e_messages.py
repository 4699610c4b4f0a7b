"""End to end: `POST /v1/messages` with the official `anthropic` SDK (only base_url changed), in front
of the simulator, which speaks chat completions; what it received is read back from it."""

from __future__ import annotations

import anthropic
import pytest

from gateway.simulator.testing import SimProcess
from tests.apis.conftest import FAST, FELL_BACK_FROM_FAST, KeyedGateway, last_request

WEATHER_TOOL = {"name": "get_weather", "description": "Weather in a city",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HELLO = [{"role": "user", "content": "Say hello"}]


def client(gw: KeyedGateway, key: str | None = None) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=key or gw.key, max_retries=0)


def test_plain_with_a_system_prompt_and_routing_headers(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    raw = client(api_gateway).messages.with_raw_response.create(
        model="m", max_tokens=7, system="You are terse.", messages=HELLO, extra_body=FAST)  # type: ignore[arg-type]
    message = raw.parse()
    assert message.type == "message" and message.role == "assistant" and message.stop_reason == "max_tokens"
    [block] = message.content
    assert block.type == "text" and len(block.text.split()) == 7
    assert message.usage.output_tokens == 7 and message.usage.input_tokens > 0
    assert raw.headers["x-ultraroute-endpoint"] == "fast" and raw.headers["x-ultraroute-tier"] == "fast"
    sent = last_request(api_sim, "fast", "/chat/completions")
    assert sent["messages"] == [{"role": "system", "content": "You are terse."}, *HELLO] and sent["max_tokens"] == 7


def test_stream_with_system_blocks(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    with client(api_gateway).messages.stream(model="m", max_tokens=12, messages=HELLO,  # type: ignore[arg-type]
                                             system=[{"type": "text", "text": "Be kind."}], extra_body=FAST) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    # The simulator answers exactly max_tokens tokens when a limit is set (Messages always sets one).
    assert final.stop_reason == "max_tokens" and final.content[0].text == text  # type: ignore[union-attr]
    assert len(text.split()) == 12 and final.usage.output_tokens == 12 and final.usage.input_tokens > 0
    assert last_request(api_sim, "fast", "/chat/completions")["messages"][0] == {"role": "system",
                                                                                 "content": "Be kind."}


def test_raw_stream_events(api_gateway: KeyedGateway) -> None:
    events = list(client(api_gateway).messages.create(model="m", max_tokens=12, messages=HELLO,  # type: ignore[arg-type]
                                                      stream=True, extra_body=FAST))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[1] == "content_block_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert kinds.count("content_block_delta") == 12
    assert events[-2].delta.stop_reason == "max_tokens" and events[-2].usage.output_tokens == 12  # type: ignore[union-attr]


def test_tool_round_trip(api_gateway: KeyedGateway, api_sim: SimProcess) -> None:
    c = client(api_gateway)
    question = {"role": "user", "content": "Weather in Paris?"}
    first = c.messages.create(model="m", max_tokens=64, messages=[question], tools=[WEATHER_TOOL],  # type: ignore[list-item]
                              extra_body=FAST)
    assert first.stop_reason == "tool_use"
    [use] = [b for b in first.content if b.type == "tool_use"]
    assert use.name == "get_weather" and set(use.input) == {"city"}  # type: ignore[arg-type]
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}]}
    second = c.messages.create(model="m", max_tokens=64, tools=[WEATHER_TOOL],  # type: ignore[list-item]
                               messages=[question, {"role": "assistant", "content": first.content}, result],  # type: ignore[list-item]
                               extra_body=FAST)
    assert second.stop_reason == "max_tokens" and second.content[0].type == "text"
    sent = last_request(api_sim, "fast", "/chat/completions")
    assert sent["tools"][0]["function"]["parameters"] == WEATHER_TOOL["input_schema"]
    assert sent["messages"][1]["tool_calls"][0]["id"] == use.id
    assert sent["messages"][2] == {"role": "tool", "tool_call_id": use.id, "content": "sunny"}


def test_streamed_tool_use_input_json(api_gateway: KeyedGateway) -> None:
    with client(api_gateway).messages.stream(model="m", max_tokens=64, messages=HELLO, tools=[WEATHER_TOOL],  # type: ignore[arg-type, list-item]
                                             tool_choice={"type": "tool", "name": "get_weather"},
                                             extra_body=FAST) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
    assert "input_json" in kinds and final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use" and "city" in final.content[0].input  # type: ignore[operator]


@pytest.mark.usefixtures("failing_fast")
def test_fallback_from_a_failing_fast_tier(api_gateway: KeyedGateway) -> None:
    raw = client(api_gateway).messages.with_raw_response.create(model="m", max_tokens=8, messages=HELLO,  # type: ignore[arg-type]
                                                                extra_body=FAST)
    assert raw.parse().content
    assert raw.headers["x-ultraroute-endpoint"] == "std"
    assert FELL_BACK_FROM_FAST.match(raw.headers["x-ultraroute-fallback"]), raw.headers


def test_errors_in_anthropic_shape(api_gateway: KeyedGateway) -> None:
    c = client(api_gateway)
    with pytest.raises(anthropic.NotFoundError) as unknown:
        c.messages.create(model="no-such-model", max_tokens=8, messages=HELLO)  # type: ignore[arg-type]
    assert unknown.value.body["type"] == "error" and unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError) as invalid:
        c.messages.create(model="m", max_tokens=0, messages=HELLO)  # type: ignore[arg-type]
    assert invalid.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert "max_tokens" in invalid.value.body["error"]["message"]  # type: ignore[index]
    with pytest.raises(anthropic.RateLimitError) as limited:
        client(api_gateway, api_gateway.limited).messages.create(model="m", max_tokens=8, messages=HELLO)  # type: ignore[arg-type]
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    with pytest.raises(anthropic.AuthenticationError) as wrong:
        client(api_gateway, "ur-wrong").messages.create(model="m", max_tokens=8, messages=HELLO)  # type: ignore[arg-type]
    assert wrong.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
