"""End to end: `POST /v1/messages` with the official `anthropic` SDK (only base_url changed), in front
of the simulator, which speaks chat completions; what it received is read back from it. The requests
Claude Code really sends (tests/fixtures/agents/) are replayed through the SDK; `agents` is a gateway
of its own with an endpoint that reasons and one that, like llama.cpp's server, sends no usage."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.apis.conftest import FAST, FELL_BACK_FROM_FAST, PROFILE, KeyedGateway, access_line, last_request
from tests.harness import GatewayProcess, catalogue_for

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "agents"

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
        client(api_gateway, api_gateway.spent_key()).messages.create(model="m", max_tokens=8, messages=HELLO)  # type: ignore[arg-type]
    assert limited.value.body["error"]["type"] == "rate_limit_error"  # type: ignore[index]
    with pytest.raises(anthropic.AuthenticationError) as wrong:
        client(api_gateway, "ur-wrong").messages.create(model="m", max_tokens=8, messages=HELLO)  # type: ignore[arg-type]
    assert wrong.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]


# -- Claude Code, and what the Messages API grows -------------------------------------------------
@pytest.fixture(scope="module")
def agents() -> Iterator[tuple[SimProcess, GatewayProcess]]:
    profiles = {"thinks": dict(PROFILE), "llama": {**PROFILE, "faults": {"ignore_include_usage": True}}}
    with SimProcess(make_sim_config(profiles)) as sim:
        catalogue = catalogue_for(sim, {"r": [{"sim": "thinks", "capabilities": ["reasoning", "tools"]}],
                                        "llama": [{"sim": "llama", "stream_usage": False}]})
        with GatewayProcess(catalogue) as gw:
            yield sim, gw



def claude_code(name: str) -> tuple[dict[str, Any], dict[str, str]]:
    """A captured Claude Code request: its body, and the headers the SDK does not set itself."""
    captured = json.loads((FIXTURES / name).read_text())
    headers = {k: v for k, v in captured["headers"].items() if k.lower() in ("anthropic-beta", "x-app",
                                                                               "x-claude-code-session-id")}
    return captured["body"], headers


def replay(c: anthropic.Anthropic, body: dict[str, Any], headers: dict[str, str], model: str,
           max_tokens: int = 16) -> tuple[dict[str, str], list[Any]]:
    """Send a captured body with the SDK as Claude Code does (`?beta=true`, its beta headers, a stream);
    its routing model and a small max_tokens instead of Anthropic's. Returns the headers and events."""
    typed = ("messages", "system", "tools", "metadata")
    extra = {k: v for k, v in body.items() if k not in (*typed, "model", "max_tokens", "stream")}
    with c.messages.with_streaming_response.create(  # type: ignore[call-overload]
            model=model, max_tokens=max_tokens, stream=True, extra_query={"beta": "true"}, extra_headers=headers,
            extra_body=extra, **{k: body[k] for k in typed}) as response:
        assert response.http_response.status_code == 200
        return dict(response.headers), list(response.parse())


@pytest.mark.parametrize("name", ["claude_code_messages.json", "claude_code_messages_tool_result.json"])
def test_what_claude_code_sends_is_served_and_what_was_dropped_is_named(
        api_gateway: KeyedGateway, api_sim: SimProcess, name: str) -> None:
    body, headers = claude_code(name)
    got, events = replay(client(api_gateway), body, headers, "m")
    dropped = got["x-ultraroute-dropped"].split(", ")
    # The endpoints of `m` do not reason: thinking and effort are named with the rest.
    assert {"cache_control", "context_management", "tools.defer_loading", "thinking",
            "output_config.effort"} <= set(dropped)
    assert access_line(api_gateway, got["x-request-id"])["dropped"] == dropped
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    sent = last_request(api_sim, got["x-ultraroute-endpoint"], "/chat/completions")
    assert [m["role"] for m in sent["messages"][:3]] == ["system", "user", "system"]
    assert len(sent["tools"]) == 12 and "reasoning_effort" not in sent and "context_management" not in sent
    if "tool_result" in name:  # the round trip: Claude Code's thinking + tool_use, then its tool_result
        assert "content.thinking" in dropped
        assert sent["messages"][-2]["tool_calls"][0]["function"]["name"] == "Bash"
        assert sent["messages"][-1] == {"role": "tool", "tool_call_id": "toolu_1",
                                        "content": "(Bash completed with no output)"}
        assert events[-2].delta.stop_reason == "max_tokens"  # it answered in text after the tool result
    else:  # the simulator calls one of the tools offered
        assert events[-2].delta.stop_reason == "tool_use"


def test_thinking_and_effort_reach_an_endpoint_that_reasons(agents: tuple[SimProcess, GatewayProcess]) -> None:
    sim, gw = agents
    body, headers = claude_code("claude_code_messages.json")
    got, _ = replay(anthropic.Anthropic(base_url=gw.url, api_key="none", max_retries=0), body, headers, "r")
    assert "thinking" not in got["x-ultraroute-dropped"] and "context_management" in got["x-ultraroute-dropped"]
    assert last_request(sim, "thinks", "/chat/completions")["reasoning_effort"] == "medium"  # output_config.effort


def test_forcing_a_server_tool_is_refused_naming_both(api_gateway: KeyedGateway) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        client(api_gateway).messages.create(model="m", max_tokens=8, messages=HELLO,  # type: ignore[arg-type]
                                            tools=[{"type": "web_search_20250305", "name": "web_search"}],
                                            tool_choice={"type": "tool", "name": "web_search"})
    error = refused.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error" and "tools.web_search" in error["message"]
    assert "'web_search'" in error["message"]


def test_usage_is_carried_when_the_upstream_sends_none(agents: tuple[SimProcess, GatewayProcess]) -> None:
    """Issue 32 item 1: behind an endpoint that ignores include_usage, the stream's message_start has
    the input estimate and its message_delta the usage charged; the JSON answer too."""
    _, gw = agents
    c = anthropic.Anthropic(base_url=gw.url, api_key="none", max_retries=0)
    ask: dict[str, Any] = {"model": "llama", "max_tokens": 9, "messages": HELLO, "system": "Be brief."}
    estimate = c.messages.count_tokens(model="llama", messages=HELLO, system="Be brief.").input_tokens  # type: ignore[arg-type]
    assert estimate == -(-len("Be brief.Say hello") // 4)
    with c.messages.stream(**ask) as stream:
        events = list(stream)
        final = stream.get_final_message()
    assert events[0].type == "message_start" and events[0].message.usage.input_tokens == estimate
    assert final.usage.input_tokens == estimate and final.usage.output_tokens == 9
    [delta] = [e for e in events if e.type == "message_delta"]
    assert delta.usage.output_tokens == 9 and delta.usage.model_extra == {"estimated": True}
    message = c.messages.create(**ask)
    assert message.usage.input_tokens == estimate and message.usage.output_tokens == 9


def test_count_tokens(api_gateway: KeyedGateway) -> None:
    c = client(api_gateway)
    small = c.messages.count_tokens(model="m", messages=HELLO).input_tokens  # type: ignore[arg-type]
    body, headers = claude_code("claude_code_messages.json")
    big = c.messages.count_tokens(model="m", messages=body["messages"], system=body["system"], tools=body["tools"],
                                  extra_query={"beta": "true"}, extra_headers=headers).input_tokens
    assert 0 < small < 10 and big > 10_000  # ~48 KB of system, messages and tools, ~4 characters a token
    with pytest.raises(anthropic.NotFoundError) as unknown:
        c.messages.count_tokens(model="no-such-model", messages=HELLO)  # type: ignore[arg-type]
    assert unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.AuthenticationError):
        client(api_gateway, "ur-wrong").messages.count_tokens(model="m", messages=HELLO)  # type: ignore[arg-type]
    with pytest.raises(anthropic.BadRequestError) as invalid:
        c.messages.count_tokens(model="m", messages=[])
    assert "messages" in invalid.value.body["error"]["message"]  # type: ignore[index]
