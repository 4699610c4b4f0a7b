"""`gateway.apis.responses_render`: chat-completion chunks -> the Responses object and event stream."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.apis.responses_render import ResponsesCall, ResponsesStream, render_response
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
