"""`gateway.apis.responses`: a Responses request body -> the chat completions body (unit tests)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.apis.responses import input_messages, output_messages, translate
from gateway.errors import InvalidRequest


def test_items_become_chat_messages() -> None:
    items: list[Any] = [
        {"role": "developer", "content": "Rules."},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Look: "},
            {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.",
                                                              "annotations": []}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}", "id": "fc_1", "status": "completed"},
        {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{\"a\":1}"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]},
    ]
    assert input_messages(items) == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": [{"type": "text", "text": "Look: "},
                                     {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA",
                                                                         "detail": "auto"}}]},
        {"role": "assistant", "content": "Checking.", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{\"a\":1}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]


def test_options_are_translated_and_routing_fields_kept() -> None:
    chat, call = translate({
        "model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 9, "temperature": 0.2,
        "top_p": 0.9, "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
        "tool_choice": {"type": "function", "name": "f"}, "reasoning": {"effort": "low"}, "stream": True,
        "text": {"format": {"type": "json_schema", "name": "Out", "schema": {"type": "object"}, "strict": True}},
        "speed": "fast", "provider": {"sort": "latency"}, "store": True, "metadata": {"a": "b"}, "user": "u1"})
    assert chat == {
        "model": "m", "stream": True, "speed": "fast", "provider": {"sort": "latency"},
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 9, "temperature": 0.2, "top_p": 0.9,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "Out", "schema": {"type": "object"},
                                                                   "strict": True}},
        "reasoning_effort": "low"}
    assert call.store and call.metadata == {"a": "b"} and call.instructions == "Be brief."


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m"}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
    ({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}, "tools[0]"),
    ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format"),
    ({"model": "m", "input": "x", "background": True}, "background"),
    ({"model": "m", "input": [{"role": {}, "content": "x"}]}, "input[0].role"),
    ({"model": "m", "input": "x", "previous_response_id": 7}, "previous_response_id"),
])
def test_invalid_bodies_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        translate(body)
    assert err.value.param == param


def test_output_items_become_one_assistant_turn() -> None:
    output = [{"type": "reasoning", "id": "rs", "summary": []},
              {"type": "message", "content": [{"type": "output_text", "text": "Let me check."}]},
              {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}]
    assert output_messages(output) == [{"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}]
