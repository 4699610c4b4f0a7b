"""`gateway.apis.responses_render`: chat-completion chunks -> the Responses object and event stream."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.apis.responses_render import ResponsesCall, ResponsesStream, render_response, usage_of
from gateway.apis.responses_tools import ToolName
from gateway.errors import UpstreamError

CALL = ResponsesCall(model="m", instructions=None, tools=(), tool_choice="auto", text={"format": {"type": "text"}},
                     max_output_tokens=None, temperature=None, top_p=None, parallel_tool_calls=True, metadata={},
                     store=False, previous_response_id=None, input_messages=())
USAGE = {"prompt_tokens": 10, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4}}


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}


def events(data: bytes) -> list[dict[str, Any]]:
    out = []
    for block in data.decode().strip().split("\n\n"):
        name, payload = block.split("\n")
        event = orjson.loads(payload.removeprefix("data: "))
        assert name == f"event: {event['type']}"
        out.append(event)
    return out


def test_text_then_a_tool_call_stream() -> None:
    stream = ResponsesStream(CALL)
    data = stream.start()
    data += stream.feed([chunk({"reasoning_content": "hmm"}), chunk({"role": "assistant", "content": "Hel"}),
                         chunk({"content": "lo"})])
    data += stream.feed([chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": ""}}]}),
                         chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"a\":"}}]}),
                         chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}, "tool_calls"),
                         {"choices": [], "usage": USAGE}])
    data += stream.finish()
    got = events(data)
    assert [e["sequence_number"] for e in got] == list(range(len(got)))
    assert [e["type"] for e in got] == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.output_item.done",  # the reasoning item
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added", "response.function_call_arguments.delta",
        "response.function_call_arguments.delta", "response.function_call_arguments.done",
        "response.output_item.done", "response.completed"]
    final = got[-1]["response"]
    assert [i["type"] for i in final["output"]] == ["reasoning", "message", "function_call"]
    assert final["output"][1]["content"][0]["text"] == "Hello"
    assert final["output"][2]["arguments"] == "{\"a\":1}" and final["output"][2]["call_id"] == "c1"
    assert final["usage"] == {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 3,
                              "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 13}
    assert stream.result() == final


def test_cut_by_the_token_limit_is_incomplete_and_a_failure_is_failed() -> None:
    stream = ResponsesStream(CALL)
    stream.start()
    stream.feed([chunk({"content": "a"}, "length")])
    assert events(stream.finish())[-1]["type"] == "response.incomplete"
    broken = ResponsesStream(CALL)
    broken.start()
    tail = events(broken.fail(UpstreamError("upstream stalled", status=504)))
    assert [e["type"] for e in tail] == ["error", "response.failed"]
    assert tail[1]["response"]["status"] == "failed" and tail[1]["response"]["error"]["message"] == "upstream stalled"


def test_json_response_from_an_assembled_completion() -> None:
    completion = {"created": 5, "usage": USAGE, "choices": [{"finish_reason": "stop", "message": {
        "content": "Hi", "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": "{}"}}]}}]}
    response = render_response(completion, CALL)
    assert response["object"] == "response" and response["status"] == "completed" and response["created_at"] == 5
    assert [(i["type"], i.get("call_id")) for i in response["output"]] == [("message", None), ("function_call", "c1")]


NAMED = CALL._replace(tool_names={"multi_agent_v1__spawn_agent": ToolName("spawn_agent", "multi_agent_v1"),
                                  "apply_patch": ToolName("apply_patch", custom=True)})


def test_a_namespaced_call_is_rendered_as_the_tool_the_client_offered() -> None:
    completion = {"choices": [{"finish_reason": "tool_calls", "message": {"content": None, "tool_calls": [
        {"id": "c1", "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{\"n\":1}"}},
        {"id": "c2", "function": {"name": "apply_patch", "arguments": "{\"input\":\"*** Begin Patch\"}"}}]}}]}
    spawn, patch = render_response(completion, NAMED)["output"]
    assert (spawn["type"], spawn["name"], spawn["namespace"], spawn["arguments"]) == (
        "function_call", "spawn_agent", "multi_agent_v1", "{\"n\":1}")
    assert (patch["type"], patch["name"], patch["input"], patch["call_id"]) == (
        "custom_tool_call", "apply_patch", "*** Begin Patch", "c2")


def test_streamed_namespaced_and_custom_calls() -> None:
    stream = ResponsesStream(NAMED)
    stream.start()
    data = stream.feed([
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "multi_agent_v1__spawn_agent",
                                                                    "arguments": "{}"}}]}),
        chunk({"tool_calls": [{"index": 1, "id": "c2", "function": {"name": "apply_patch", "arguments": "{\"in"}}]}),
        chunk({"tool_calls": [{"index": 1, "function": {"arguments": "put\":\"x\"}"}}]}, "tool_calls")])
    got = events(data + stream.finish())
    added = [e["item"] for e in got if e["type"] == "response.output_item.added"]
    assert added[0]["namespace"] == "multi_agent_v1" and added[0]["name"] == "spawn_agent"
    assert added[1]["type"] == "custom_tool_call" and added[1]["name"] == "apply_patch"
    [done] = [e for e in got if e["type"] == "response.custom_tool_call_input.done"]
    assert done["input"] == "x"
    assert [e["delta"] for e in got if e["type"] == "response.function_call_arguments.delta"] == ["{}"]
    output = got[-1]["response"]["output"]
    assert [(i["type"], i["name"], i.get("namespace")) for i in output] == [
        ("function_call", "spawn_agent", "multi_agent_v1"), ("custom_tool_call", "apply_patch", None)]


def test_every_terminal_event_carries_the_usage_and_says_when_it_is_estimated() -> None:
    estimated = {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8, "estimated": True}
    stream = ResponsesStream(CALL)
    stream.start()
    stream.feed([chunk({"content": "a"}, "length")])
    stream.feed([{"choices": [], "usage": estimated}])
    incomplete = events(stream.finish())[-1]["response"]
    assert incomplete["usage"]["output_tokens"] == 1 and incomplete["usage"]["estimated"] is True
    broken = ResponsesStream(CALL)
    broken.start()
    broken.feed([chunk({"content": "a"}), {"choices": [], "usage": estimated}])
    failed = events(broken.fail(UpstreamError("upstream stalled", status=504)))[-1]["response"]
    assert failed["usage"]["input_tokens"] == 7 and failed["usage"]["estimated"] is True
    assert "estimated" not in usage_of(USAGE)  # type: ignore[operator]
