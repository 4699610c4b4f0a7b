"""End to end: chat and Messages clients (official SDKs) through the gateway to an
`api: openai-responses` endpoint of the simulator, which speaks OpenAI Responses: plain, streamed,
a tool round trip, and what the upstream received."""

from __future__ import annotations

import json

from gateway.simulator.testing import SimProcess
from tests.harness import GatewayProcess
from tests.upstreams.conftest import CHAT_TOOL, RESPONSES_TOOL, chat, claude, messages_tool_round, sent

HELLO = [{"role": "user", "content": "Say hello"}]


def test_chat_client_plain_and_streamed(gw: GatewayProcess, sim: SimProcess) -> None:
    raw = chat(gw).chat.completions.with_raw_response.create(
        model="r", max_tokens=5, messages=[{"role": "system", "content": "Be brief."}, *HELLO])  # type: ignore[list-item]
    answer = raw.parse()
    assert raw.headers["x-ultraroute-endpoint"] == "gpt" and answer.choices[0].finish_reason == "length"
    assert answer.usage is not None and answer.usage.completion_tokens == 5 and len(
        (answer.choices[0].message.content or "").split()) == 5
    body = sent(sim, "gpt", "/responses")
    assert body["model"] == "gpt-5" and body["max_output_tokens"] == 5 and body["store"] is False
    assert body["input"] == [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]
    chunks = list(chat(gw).chat.completions.create(model="r", messages=HELLO, stream=True,  # type: ignore[arg-type]
                                                   stream_options={"include_usage": True}))
    assert len("".join(c.choices[0].delta.content or "" for c in chunks if c.choices).split()) == 8
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]


def test_chat_client_tool_round_trip(gw: GatewayProcess, sim: SimProcess) -> None:
    c = chat(gw)
    first = c.chat.completions.create(model="r", messages=HELLO, tools=[CHAT_TOOL])  # type: ignore[list-item, arg-type]
    assert first.choices[0].finish_reason == "tool_calls"
    [call] = first.choices[0].message.tool_calls or []
    assert call.function.name == "get_weather" and set(json.loads(call.function.arguments)) == {"city"}
    second = c.chat.completions.create(model="r", tools=[CHAT_TOOL], messages=[  # type: ignore[list-item, arg-type]
        *HELLO, first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"}])
    assert second.choices[0].message.content and second.choices[0].finish_reason == "stop"
    body = sent(sim, "gpt", "/responses")
    assert body["tools"] == [{"type": "function", **CHAT_TOOL["function"]}]  # type: ignore[dict-item]
    assert body["input"][1] == {"type": "function_call", "call_id": call.id, "name": "get_weather",
                                "arguments": call.function.arguments}
    assert body["input"][2] == {"type": "function_call_output", "call_id": call.id, "output": "sunny"}


def test_messages_client_plain_stream_and_tools(gw: GatewayProcess) -> None:
    c = claude(gw)
    message = c.messages.create(model="r", max_tokens=6, messages=HELLO)  # type: ignore[arg-type]
    assert message.stop_reason == "max_tokens" and message.usage.output_tokens == 6
    with c.messages.stream(model="r", max_tokens=64, messages=HELLO) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 8
    second = messages_tool_round(c, "r", max_tokens=64)
    assert second.content[-1].type == "text" and second.stop_reason == "end_turn"


def test_responses_client_passed_through_plain_streamed_and_tools(gw: GatewayProcess, sim: SimProcess) -> None:
    c = chat(gw)
    response = c.responses.create(model="r", input="Say hello", max_output_tokens=5)
    assert response.status == "incomplete" and len(response.output_text.split()) == 5
    with c.responses.stream(model="r", input="Say hello") as stream:
        final = stream.get_final_response()
    assert final.status == "completed" and len(final.output_text.split()) == 8 and final.model == "r"
    first = c.responses.create(model="r", input="Weather?", tools=[RESPONSES_TOOL])  # type: ignore[list-item]
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "get_weather" and set(json.loads(call.arguments)) == {"city"}
    second = c.responses.create(model="r", tools=[RESPONSES_TOOL], input=[  # type: ignore[list-item]
        {"role": "user", "content": "Weather?"},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}])
    assert second.output_text and second.status == "completed"
    assert sent(sim, "gpt", "/responses")["input"][2] == {"type": "function_call_output", "call_id": call.call_id,
                                                          "output": "sunny"}  # as the client sent it
