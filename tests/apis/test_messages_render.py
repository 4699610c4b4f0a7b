"""`gateway.apis.messages_render`: chat-completion chunks -> the Messages object and event stream."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.apis.messages_render import MessagesStream, render_message
from gateway.errors import ResponseNotFound, error_body

USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def events(data: bytes) -> list[dict[str, Any]]:
    out = []
    for block in data.decode().strip().split("\n\n"):
        name, payload = block.split("\n")
        event = orjson.loads(payload.removeprefix("data: "))
        assert name == f"event: {event['type']}"  # the Anthropic SDK dispatches on the event line
        out.append(event)
    return out


def test_text_then_tool_use_stream() -> None:
    stream = MessagesStream("m")
    data = stream.start() + stream.feed([
        chunk({"role": "assistant", "content": "Let"}), chunk({"content": " me"}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{\"a\""}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}, "tool_calls"),
        {"choices": [], "usage": USAGE}]) + stream.finish()
    got = events(data)
    assert [e["type"] for e in got] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    assert got[6]["content_block"] == {"type": "tool_use", "id": "c1", "name": "f", "input": {}}
    assert got[8]["delta"] == {"type": "input_json_delta", "partial_json": ":1}"} and got[8]["index"] == 1
    assert got[10]["delta"]["stop_reason"] == "tool_use"
    assert got[10]["usage"] == {"input_tokens": 6, "output_tokens": 3, "cache_creation_input_tokens": 0,
                                "cache_read_input_tokens": 4}


def test_json_message_and_error_shape() -> None:
    completion = {"usage": USAGE, "choices": [{"finish_reason": "length", "message": {
        "content": "Hi", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "not json"}}]}}]}
    message = render_message(completion, "m")
    assert message["stop_reason"] == "max_tokens" and message["model"] == "m"
    assert message["content"] == [{"type": "text", "text": "Hi"},
                                  {"type": "tool_use", "id": "c1", "name": "f", "input": {}}]
    body = orjson.loads(error_body(ResponseNotFound("resp_1", "previous_response_id"), "anthropic"))
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"


def test_the_start_carries_the_input_estimate_and_the_end_an_estimated_usage() -> None:
    stream = MessagesStream("m", input_estimate=42)
    started = events(stream.start())[0]
    assert started["message"]["usage"]["input_tokens"] == 42
    # What the pipeline feeds when the upstream sent no usage: the meter's estimate.
    stream.feed([chunk({"content": "hi"}, "stop"),
                 {"choices": [], "usage": {"prompt_tokens": 42, "completion_tokens": 1, "estimated": True}}])
    delta = events(stream.finish())[-2]
    assert delta["usage"] == {"input_tokens": 42, "output_tokens": 1, "cache_creation_input_tokens": 0,
                              "cache_read_input_tokens": 0, "estimated": True}
