"""End to end: chat, Messages and Responses clients (official SDKs) through the gateway to an
`api: anthropic` endpoint of the simulator, which speaks Anthropic Messages: plain, streamed, a tool
round trip; `speed: fast` with its beta header; a 529 on the fast tier falls back to a chat host."""

from __future__ import annotations

import json
import re

import openai

from gateway.simulator.testing import SimProcess
from gateway.upstreams.anthropic import FAST_BETA
from tests.harness import GatewayProcess
from tests.upstreams.conftest import CHAT_TOOL, RESPONSES_TOOL, chat, claude, messages_tool_round, sent

HELLO = [{"role": "user", "content": "Say hello"}]
FAST = {"speed": "fast"}  # routing: the fast tier first


def test_chat_client_plain(gw: GatewayProcess, sim: SimProcess) -> None:
    raw = chat(gw).chat.completions.with_raw_response.create(
        model="a", max_tokens=6, messages=[{"role": "system", "content": "Be brief."}, *HELLO])  # type: ignore[list-item]
    answer = raw.parse()
    assert raw.headers["x-ultraroute-endpoint"] == "claude"
    assert answer.choices[0].finish_reason == "length" and answer.choices[0].message.content
    assert answer.usage is not None and answer.usage.completion_tokens == 6 and answer.usage.prompt_tokens > 0
    body = sent(sim, "claude", "/messages")
    assert body["model"] == "claude-sonnet-4-6" and body["system"] == "Be brief." and body["max_tokens"] == 6
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}]
    assert "speed" not in body  # no service_tier on this endpoint
    headers = sim.requests("claude")[-1]["headers"]
    assert headers["anthropic-version"] == "2023-06-01" and headers["x-api-key"] == "present"
    assert "anthropic-beta" not in headers  # the fast-mode beta only with speed: fast


def test_chat_client_streams_reasoning_then_content_with_usage(gw: GatewayProcess) -> None:
    chunks = list(chat(gw).chat.completions.create(model="a", max_tokens=8, messages=HELLO, stream=True,  # type: ignore[arg-type]
                                                   stream_options={"include_usage": True}))
    reasoning = "".join(getattr(c.choices[0].delta, "reasoning_content", None) or "" for c in chunks if c.choices)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(reasoning.split()) == 3 and len(content.split()) == 5
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]


def test_chat_client_tool_round_trip(gw: GatewayProcess, sim: SimProcess) -> None:
    c = chat(gw)
    first = c.chat.completions.create(model="a", max_tokens=64, messages=HELLO, tools=[CHAT_TOOL])  # type: ignore[list-item, arg-type]
    assert first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather" and set(json.loads(call.function.arguments)) == {"city"}
    second = c.chat.completions.create(model="a", max_tokens=5, tools=[CHAT_TOOL], messages=[  # type: ignore[list-item, arg-type]
        *HELLO, first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
    assert second.choices[0].message.content
    body = sent(sim, "claude", "/messages")
    assert body["tools"] == [{"name": "get_weather", "input_schema": CHAT_TOOL["function"]["parameters"],  # type: ignore[index]
                              "description": "Weather in a city"}]
    use = body["messages"][1]["content"][-1]
    assert use["type"] == "tool_use" and use["id"] == call.id and set(use["input"]) == {"city"}
    assert body["messages"][2] == {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": call.id, "content": "sunny"}]}


def test_messages_client_plain_stream_and_tools(gw: GatewayProcess) -> None:
    c = claude(gw)
    message = c.messages.create(model="a", max_tokens=6, messages=HELLO)  # type: ignore[arg-type]
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 6
    with c.messages.stream(model="a", max_tokens=8, messages=HELLO) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert [b.type for b in final.content][-1] == "text" and final.usage.output_tokens == 8
    second = messages_tool_round(c, "a", max_tokens=4)
    assert second.content[-1].type == "text" and second.stop_reason == "max_tokens"


def test_responses_client_plain_stream_and_tools(gw: GatewayProcess) -> None:
    c = chat(gw)
    response = c.responses.create(model="a", input="Say hello", max_output_tokens=6)
    assert response.usage is not None and response.usage.output_tokens == 6 and response.output_text
    with c.responses.stream(model="a", input="Say hello") as stream:  # the SDK wants response.completed
        final = stream.get_final_response()
    assert final.output_text and final.usage is not None and final.usage.output_tokens == 8 + 3  # and reasoning
    first = c.responses.create(model="a", input="Weather?", tools=[RESPONSES_TOOL])  # type: ignore[list-item]
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and set(json.loads(call.arguments)) == {"city"}
    second = c.responses.create(model="a", tools=[RESPONSES_TOOL], max_output_tokens=4, input=[  # type: ignore[list-item]
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert second.output_text


def test_fast_mode_asks_speed_fast_with_its_beta(gw: GatewayProcess, sim: SimProcess) -> None:
    raw = chat(gw).chat.completions.with_raw_response.create(model="c", max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
                                                             extra_body=FAST)
    assert raw.headers["x-ultraroute-endpoint"] == "claude-fast"
    assert sent(sim, "claude-fast", "/messages")["speed"] == "fast"
    assert sim.requests("claude-fast")[-1]["headers"]["anthropic-beta"] == FAST_BETA


def test_529_on_the_fast_tier_falls_back_to_a_chat_host(gw: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("claude-fast", faults={"error_rate": 1.0, "error_status": 529})
    raw = chat(gw).chat.completions.with_raw_response.create(model="c", max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
                                                             extra_body=FAST)
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-ultraroute-endpoint"] == "open"
    # A 529 is a 503 to the gateway: failed over (and maybe tried once more first, as a sporadic 503 is).
    assert re.fullmatch(r"claude-fast->(claude-fast->)?open \(upstream_5xx(,upstream_5xx)?\)",
                        raw.headers["x-ultraroute-fallback"])
    assert sim.stats("claude-fast")["requests"] >= 1 and sent(sim, "open", "/chat/completions")["model"] == "upstream-c"


def test_an_anthropic_error_reaches_the_client_in_its_shape(gw: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("claude", faults={"error_rate": 1.0, "error_status": 400})
    try:
        chat(gw).chat.completions.create(model="a", max_tokens=4, messages=HELLO)  # type: ignore[arg-type]
    except openai.BadRequestError as err:
        assert "Simulated upstream error 400" in str(err)
    else:
        raise AssertionError("the 400 was not passed on")


def test_server_side_fallbacks_become_the_gateways_models(gw: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("claude", faults={"error_rate": 1.0, "error_status": 503})
    raw = claude(gw).messages.with_raw_response.create(
        model="a", max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
        extra_body={"fallbacks": [{"model": "r", "max_tokens": 4}]},
        extra_headers={"anthropic-beta": "server-side-fallback-2026-07-01"})
    assert raw.parse().content[0].type == "text"
    assert raw.headers["x-ultraroute-endpoint"] == "gpt"  # model r, on another provider and API
    assert "fallbacks" not in sent(sim, "claude", "/messages")  # never acted on twice
    assert "fallbacks" not in sent(sim, "gpt", "/responses")


def test_anthropic_rate_limit_headers_cool_the_endpoint_down(gw: GatewayProcess, sim: SimProcess) -> None:
    # Two requests a minute: the second answer says none is left (anthropic-ratelimit-requests-remaining: 0).
    served = []
    for _ in range(3):
        raw = chat(gw).chat.completions.with_raw_response.create(model="l", max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
                                                                 extra_body=FAST)
        raw.parse()
        served.append((raw.headers["x-ultraroute-endpoint"], raw.headers.get("x-ultraroute-fallback", "")))
    assert served[:2] == [("claude-limited", ""), ("claude-limited", "")]
    # The third is not sent there to be refused: the gateway waits out the reset the headers gave.
    assert served[2] == ("open", "claude-limited->open (cooldown)")
    assert sim.stats("claude-limited")["requests"] == 2


def test_an_overloaded_error_event_before_the_first_token_fails_over(gw: GatewayProcess, sim: SimProcess) -> None:
    # Anthropic may also say `overloaded_error` as an SSE `error` event after a 200: before any token,
    # the client has seen nothing, so the gateway fails over as for a 529.
    sim.patch("claude-fast", faults={"error_event_rate": 1.0, "error_status": 529})
    raw = chat(gw).chat.completions.with_raw_response.create(model="c", max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
                                                             extra_body=FAST)
    assert raw.parse().choices[0].message.content and raw.headers["x-ultraroute-endpoint"] == "open"
    assert raw.headers["x-ultraroute-fallback"].startswith("claude-fast->")
