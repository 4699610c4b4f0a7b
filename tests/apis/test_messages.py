"""`gateway.apis.messages`: an Anthropic Messages body -> the chat completions body (unit tests)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.apis.messages import translate
from gateway.errors import InvalidRequest


def test_blocks_tools_and_options_are_translated() -> None:
    chat = translate({
        "model": "m", "max_tokens": 100, "system": [{"type": "text", "text": "Be "}, {"type": "text", "text": "kind."}],
        "stop_sequences": ["END"], "temperature": 0.5, "stream": True, "speed": "fast", "metadata": {"user_id": "u"},
        "tools": [{"name": "f", "description": "does f", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                         {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                      "data": "AA"}}]},
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "..."}, {"type": "text", "text": "Ok."},
                                              {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done"},
                                         {"type": "text", "text": "Thanks"}]},
        ]})
    assert chat == {
        "model": "m", "stream": True, "temperature": 0.5, "speed": "fast", "max_tokens": 100, "stop": ["END"],
        "messages": [
            {"role": "system", "content": "Be kind."},
            {"role": "user", "content": [{"type": "text", "text": "Hi"},
                                         {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}}]},
            {"role": "assistant", "content": "Ok.", "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{\"x\":1}"}}]},
            {"role": "tool", "tool_call_id": "t1", "content": "done"},
            {"role": "user", "content": "Thanks"}],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"},
                                                    "description": "does f"}}],
        "tool_choice": "required", "parallel_tool_calls": False}


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
    ({"model": "m", "max_tokens": 5}, "messages"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "video"}]}]},
     "messages[0].content[0].type"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
      "tool_choice": {"type": "sometimes"}}, "tool_choice.type"),
    ({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
     "temperature"),
])
def test_invalid_bodies_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        translate(body)
    assert err.value.param == param
