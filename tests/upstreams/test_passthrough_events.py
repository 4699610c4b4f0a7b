"""A pass-through translator's answer for a client that did not stream: the upstream's deltas are
kept unparsed as they arrive and parsed together at the end, so a malformed one must be left out
without shifting the others, and every block must come out whole (thinking with its signature,
text, a tool_use's input)."""

from __future__ import annotations

import orjson

from gateway.upstreams.anthropic import MessagesPassThrough
from gateway.upstreams.wire import ANSWER_TOKEN, END, NO_TOKEN, REASONING_TOKEN


def _delta(index: int, delta: dict[str, object]) -> bytes:
    return orjson.dumps({"type": "content_block_delta", "index": index, "delta": delta})


START = orjson.dumps({"type": "message_start", "message": {
    "id": "msg_1", "type": "message", "role": "assistant", "model": "upstream-model", "content": [],
    "stop_reason": None, "usage": {"input_tokens": 12, "output_tokens": 1, "speed": "fast"}}})
STREAM = [
    START,
    b'{"type":"ping"}',
    orjson.dumps({"type": "content_block_start", "index": 0,
                  "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
    _delta(0, {"type": "thinking_delta", "thinking": "Let me "}),
    _delta(0, {"type": "thinking_delta", "thinking": "think."}),
    _delta(0, {"type": "signature_delta", "signature": "c2ln"}),
    b'{"type":"content_block_stop","index":0}',
    orjson.dumps({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
    _delta(1, {"type": "text_delta", "text": "Hello"}),
    # Malformed, and shaped so that joined with its neighbours it would parse as two of them.
    b'{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"lost"}},{"type":"ping"}',
    _delta(1, {"type": "text_delta", "text": ", \"world\"\n"}),
    b'{"type":"content_block_stop","index":1}',
    orjson.dumps({"type": "content_block_start", "index": 2,
                  "content_block": {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}}),
    _delta(2, {"type": "input_json_delta", "partial_json": '{"city": '}),
    _delta(2, {"type": "input_json_delta", "partial_json": '"Paris"}'}),
    b'{"type":"content_block_stop","index":2}',
    orjson.dumps({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                  "usage": {"output_tokens": 6, "speed": "fast"}}),
    b'{"type":"message_stop"}',
]


def test_a_whole_answer_is_the_message_its_events_make_a_malformed_delta_left_out() -> None:
    native = MessagesPassThrough("public-model", whole=True)
    counted = [native.events(payload) for payload in STREAM]
    assert counted[3:6] == [REASONING_TOKEN, REASONING_TOKEN, NO_TOKEN]
    assert counted[8] == ANSWER_TOKEN and counted[-1] == [END] and native.served_tier == "fast"
    message = native.result()
    assert message["model"] == "public-model" and message["id"] == "msg_1"
    assert message["content"] == [
        {"type": "thinking", "thinking": "Let me think.", "signature": "c2ln"},
        {"type": "text", "text": 'Hello, "world"\n'},
        {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
    ]
    assert message["stop_reason"] == "tool_use"
    assert message["usage"] == {"input_tokens": 12, "output_tokens": 6, "speed": "fast"}
    assert native.take() == b""  # nothing is streamed to a client that did not stream


def test_a_streamed_answer_is_the_upstreams_events_as_they_came_model_renamed() -> None:
    native = MessagesPassThrough("public-model", whole=False)
    for payload in STREAM:
        native.events(payload)
    out = native.take()
    events = [event.split(b"\ndata: ", 1) for event in out.rstrip(b"\n").split(b"\n\n")]
    assert [name for name, _ in events] == [b"event: " + orjson.loads(p)["type"].encode() if p != STREAM[9]
                                           else b"event: content_block_delta" for p in STREAM]
    assert [data for _, data in events[1:]] == STREAM[1:]  # byte for byte
    assert orjson.loads(events[0][1])["message"]["model"] == "public-model"
