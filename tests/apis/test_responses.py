"""`gateway.apis.responses`: a Responses request body -> the chat completions body (unit tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gateway.apis.responses import ResponsesApi, output_messages, translate
from gateway.config import GatewayFile
from gateway.errors import InvalidRequest, Untranslatable

FIXTURES = Path(__file__).parents[1] / "fixtures" / "agents"


def codex(name: str) -> dict[str, Any]:
    """A request Codex CLI 0.169.0 really sent (tests/fixtures/agents/README.md)."""
    return json.loads((FIXTURES / name).read_text())  # type: ignore[no-any-return]


def test_options_are_translated_and_routing_fields_kept() -> None:
    t = translate({
        "model": "m", "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 9, "temperature": 0.2,
        "top_p": 0.9, "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": True}],
        "tool_choice": {"type": "function", "name": "f"}, "reasoning": {"effort": "low"}, "stream": True,
        "text": {"format": {"type": "json_schema", "name": "Out", "schema": {"type": "object"}, "strict": True}},
        "speed": "fast", "provider": {"sort": "latency"}, "store": True, "metadata": {"a": "b"}, "user": "u1"})
    chat, call = t.chat, t.call
    assert chat == {
        "model": "m", "stream": True, "speed": "fast", "provider": {"sort": "latency"}, "user": "u1",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
        "max_tokens": 9, "temperature": 0.2, "top_p": 0.9,
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": True}}],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "Out", "schema": {"type": "object"},
                                                                   "strict": True}},
        "reasoning_effort": "low"}
    assert call.store and call.metadata == {"a": "b"} and call.instructions == "Be brief."
    assert t.dropped == () and t.capability_fields == (("reasoning_effort", "reasoning", "reasoning.effort"),)


def test_fields_with_no_chat_equivalent_are_dropped_and_named_not_refused() -> None:
    t = translate({"model": "m", "input": "Hi", "reasoning": {"effort": "high", "summary": "auto"},
                   "text": {"format": {"type": "grammar_from_next_year"}, "verbosity": "low"}, "truncation": "auto",
                   "top_logprobs": 2, "a_field_from_next_month": {"x": 1}, "background": False,
                   "include": ["reasoning.encrypted_content"], "client_metadata": {"k": "v"},
                   "stream_options": {"include_obfuscation": False}, "truncation_ok": None})
    assert t.dropped == ("truncation", "top_logprobs", "a_field_from_next_month", "reasoning.summary",
                         "text.verbosity", "text.format.grammar_from_next_year")
    assert t.chat["reasoning_effort"] == "high" and "a_field_from_next_month" not in t.chat


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m"}, "input"),
    ({"model": "m", "input": []}, "input"),
    ({"model": "m", "input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
    ({"model": "m", "input": "x", "conversation": "conv_1"}, "conversation"),
    ({"model": "m", "input": "x", "reasoning": {"effort": 3}}, "reasoning.effort"),
    ({"model": "m", "input": "x", "max_output_tokens": 0}, "max_output_tokens"),
    ({"model": "m", "input": "x", "text": {"format": {"type": "json_schema"}}}, "text.format"),
    ({"model": "m", "input": "x", "text": {"format": {"name": "x"}}}, "text.format"),
    ({"model": "m", "input": "x", "background": True}, "background"),
    ({"model": "m", "input": [{"role": {}, "content": "x"}]}, "input[0].role"),
    ({"model": "m", "input": "x", "previous_response_id": 7}, "previous_response_id"),
])
def test_invalid_bodies_name_the_field(body: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        translate(body)
    assert err.value.param == param


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "m", "input": "x", "tools": [{"type": "web_search"}], "tool_choice": {"type": "web_search"}},
     "tool_choice"),
    ({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]},
     "input[0].content[0].image_url"),
])
def test_what_only_a_translation_cannot_honour_is_kept_not_raised(body: dict[str, Any], param: str) -> None:
    """An openai-responses endpoint is passed the body as sent and honours it; the refusal is for
    the endpoints that need the translation (dispatch.py)."""
    refusal = translate(body).refusal
    assert isinstance(refusal, Untranslatable) and refusal.param == param


def test_output_items_become_one_assistant_turn() -> None:
    output = [{"type": "reasoning", "id": "rs", "summary": [], "content": [{"type": "reasoning_text", "text": "x"}]},
              {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
              {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
              {"type": "function_call", "call_id": "c2", "name": "spawn_agent", "namespace": "multi_agent_v1",
               "arguments": "{}"}]
    assert output_messages(output) == [{"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "c2", "type": "function", "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"}}]}]


def test_codex_first_request() -> None:
    fixture = codex("codex_responses_http.json")
    raw = json.dumps(fixture["body"]).encode()
    chat = ResponsesApi().parse(raw, {k.lower(): v for k, v in fixture["headers"].items()}, "r1", GatewayFile())
    assert chat.dropped == ("tools.web_search", "reasoning.summary")
    assert chat.session_key == fixture["body"]["prompt_cache_key"]  # the conversation's affinity key
    names = [t["function"]["name"] for t in chat.body["tools"]]
    assert "exec_command" in names and "multi_agent_v1__spawn_agent" in names and len(names) == 12
    assert all(t["type"] == "function" for t in chat.body["tools"])
    roles = [m["role"] for m in chat.body["messages"]]
    assert roles == ["system", "system", "user", "user"]  # developer messages are system messages
    assert chat.stream and chat.body["prompt_cache_key"] == fixture["body"]["prompt_cache_key"]
    assert not {"include", "client_metadata", "store", "reasoning"} & set(chat.body)


def test_codex_tool_result_request_sends_the_reasoning_back() -> None:
    body = codex("codex_responses_http_tool_result.json")["body"]
    t = translate(body)
    *_, assistant, tool = t.chat["messages"]
    assert assistant["reasoning_content"] == "run it" and assistant["tool_calls"][0]["id"] == "call_1"
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_1"
    assert ("messages.reasoning_content", "reasoning", "input.reasoning") in t.capability_fields
