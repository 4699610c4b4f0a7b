"""`gateway.apis.responses_input`: Responses input items -> chat messages (unit tests)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.apis.responses_input import chat_input, input_messages
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


def test_a_namespaced_call_sent_back_maps_to_the_name_it_was_offered_by() -> None:
    given = chat_input([
        {"type": "function_call", "call_id": "c1", "name": "spawn_agent", "namespace": "multi_agent_v1",
         "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "spawned"}])
    assert given.messages[0]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"
    assert given.messages[1] == {"role": "tool", "tool_call_id": "c1", "content": "spawned"}


def test_custom_and_local_shell_calls_become_function_calls() -> None:
    given = chat_input([
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "done"},
        {"type": "local_shell_call", "call_id": "c2", "status": "completed",
         "action": {"type": "exec", "command": ["ls"]}},
        {"type": "local_shell_call_output", "id": "c2", "output": "a.txt"}])
    assert given.messages == [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "apply_patch", "arguments": "{\"input\":\"*** Begin Patch\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "done"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c2", "type": "function", "function": {
            "name": "local_shell", "arguments": "{\"type\":\"exec\",\"command\":[\"ls\"]}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "a.txt"}]
    assert given.dropped == []


def test_reasoning_goes_to_the_assistant_turn_that_follows() -> None:
    given = chat_input([
        {"role": "user", "content": "Run it"},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "run it"}], "content": None,
         "encrypted_content": "ENC"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "all done"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Done."}]}])
    assert given.reasoning and given.dropped == []
    assert given.messages[1]["reasoning_content"] == "run it" and given.messages[1]["tool_calls"]
    assert given.messages[3] == {"role": "assistant", "content": "Done.", "reasoning_content": "all done"}


def test_reasoning_with_nothing_readable_or_no_turn_after_it_is_dropped_and_named() -> None:
    given = chat_input([{"role": "user", "content": "Hi"},
                        {"type": "reasoning", "summary": [], "encrypted_content": "ENC"},
                        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]},
                        {"role": "user", "content": "Again"}])
    assert given.dropped == ["input.reasoning"] and not given.reasoning
    assert given.messages == [{"role": "user", "content": "Hi"}, {"role": "user", "content": "Again"}]


def test_items_and_parts_with_no_chat_equivalent_are_dropped_and_named() -> None:
    given = chat_input([
        {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "x"}},
        {"type": "compaction", "encrypted_content": "ENC"},
        {"type": "item_reference", "id": "msg_1"},
        {"type": "some_item_from_next_month", "x": 1},
        {"role": "user", "content": [{"type": "input_text", "text": "See "},
                                     {"type": "input_file", "file_id": "file-1"}]}])
    assert given.messages == [{"role": "user", "content": "See "}]
    assert given.dropped == ["input.web_search_call", "input.compaction", "input.item_reference",
                             "input.some_item_from_next_month", "input.content.input_file"]


@pytest.mark.parametrize(("value", "param"), [
    ([], "input"),
    ([{"role": "robot", "content": "x"}], "input[0].role"),
    ([{"role": {}, "content": "x"}], "input[0].role"),
    ([{"type": "function_call", "name": "f", "arguments": "{}"}], "input[0]"),
    ([{"type": "custom_tool_call", "call_id": "c", "name": "f", "input": 3}], "input[0]"),
    ([{"type": "function_call_output", "output": "x"}], "input[0].call_id"),
    ([{"type": 7}], "input[0].type"),
    (["text"], "input[0]"),
])
def test_malformed_items_name_the_field(value: Any, param: str) -> None:
    with pytest.raises(InvalidRequest) as err:
        chat_input(value)
    assert err.value.param == param


def test_plain_text_messages_take_the_short_way_with_the_same_result() -> None:
    """Plain-text user, system and developer messages skip `item()` (chat_input's fast path): the
    reasoning pending before one is still dropped, not carried past it to the next assistant turn,
    and an item of another type is never taken for a message because it has a role and content."""
    given = chat_input([{"type": "reasoning", "summary": [{"type": "summary_text", "text": "hmm"}]},
                        {"role": "user", "content": "Hi."},
                        {"type": "message", "role": "developer", "content": "Be brief."},
                        {"type": "web_search_call", "role": "user", "content": "not a message"},
                        {"role": "assistant", "content": "Hello."}])
    assert given.messages == [{"role": "user", "content": "Hi."}, {"role": "system", "content": "Be brief."},
                              {"role": "assistant", "content": "Hello."}]
    assert given.dropped == ["input.reasoning", "input.web_search_call"] and not given.reasoning
