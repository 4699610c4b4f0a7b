"""The Responses WebSocket's pure parts: events as frames, the error event's shape, a warm-up."""

from __future__ import annotations

import orjson

from gateway.apis.responses import translate
from gateway.apis.responses_render import ResponsesCall, ResponsesStream
from gateway.apis.responses_ws import Framed, as_items, error_frame, event_payloads, warm_up_events
from gateway.errors import ModelNotFound, UpstreamError


def _call() -> ResponsesCall:
    return translate({"model": "m", "input": "hi"}).call


def test_each_server_sent_event_becomes_one_json_frame() -> None:
    stream = ResponsesStream(_call())
    frames = [orjson.loads(p) for p in event_payloads(stream.start())]
    assert [f["type"] for f in frames] == ["response.created", "response.in_progress"]
    assert [f["sequence_number"] for f in frames] == [0, 1]


def test_an_error_event_has_the_websocket_fields() -> None:
    event = orjson.loads(error_frame(ModelNotFound("nope")))
    assert event["type"] == "error" and event["status"] == 404
    assert event["error"]["code"] == "model_not_found" and event["error"]["type"] == "invalid_request_error"


def test_a_failure_mid_stream_keeps_the_stream_event_and_adds_the_websocket_fields() -> None:
    framed = Framed(ResponsesStream(_call()))
    framed.start()
    error, failed = (orjson.loads(p) for p in event_payloads(framed.fail(UpstreamError("broke", status=502))))
    assert error["type"] == "error" and error["message"] == "broke" and error["sequence_number"] == 2
    assert error["status"] == 502 and error["error"]["code"] == error["code"] and error["error"]["message"] == "broke"
    assert failed["type"] == "response.failed" and framed.failed and framed.result() is None


def test_input_as_items() -> None:
    assert as_items("hi") == [{"type": "message", "role": "user", "content": "hi"}]
    assert as_items([]) == [] and as_items(3) is None


def test_a_warm_up_is_a_completed_response_without_output() -> None:
    response_id, frames = warm_up_events(_call())
    events = [orjson.loads(f) for f in frames]
    assert [e["type"] for e in events] == ["response.created", "response.in_progress", "response.completed"]
    assert {e["response"]["id"] for e in events} == {response_id}
    assert events[-1]["response"]["status"] == "completed" and events[-1]["response"]["output"] == []
