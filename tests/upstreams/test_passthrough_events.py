"""A pass-through translator's answer for a client that did not stream: the upstream's deltas are
kept unparsed as they arrive and parsed together at the end, so a malformed one must be left out
without shifting the others, and every block must come out whole (thinking with its signature,
text, a tool_use's input)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
import pytest

from gateway.config import Endpoint, build_catalogue, parse_catalogue
from gateway.upstreams.anthropic import MessagesPassThrough
from gateway.upstreams.openai_responses import ResponsesPassThrough
from gateway.upstreams.stream import Meter, TranslatedStream
from gateway.upstreams.wire import ANSWER_TOKEN, END, NO_TOKEN, REASONING_TOKEN


class _Reads:
    """An upstream response whose body is the one network read `raw`."""

    def __init__(self, raw: bytes) -> None:
        self.status_code = 200
        self.headers: Mapping[str, str] = {}
        self._raw = raw

    async def _body(self) -> AsyncIterator[bytes]:
        yield self._raw

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._body()

    async def aclose(self) -> None:
        return None


def _endpoint() -> Endpoint:
    data = {"providers": {"p": {"base_url": "http://p.test/v1", "api": "anthropic"}},
            "models": {"m": {"endpoints": [{"provider": "p", "model": "up", "id": "p/e",
                                            "price": {"input": 1, "output": 2}}]}}}
    return build_catalogue(parse_catalogue(data, "t.yaml"), "t.yaml", env={}).endpoints()[0]


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


def _response(status: str, output: list[dict[str, object]]) -> dict[str, object]:
    body: dict[str, object] = {"id": "resp_1", "object": "response", "status": status, "model": "upstream-model",
                               "output": output, "service_tier": "priority"}
    if status == "completed":
        body["usage"] = {"input_tokens": 9, "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 2}}
    return body


_REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "ZW5j"}
_CALL = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"}
RESPONSES = [orjson.dumps({"type": kind, **fields, "sequence_number": n}) for n, (kind, fields) in enumerate([
    ("response.created", {"response": _response("in_progress", [])}),
    ("response.in_progress", {"response": _response("in_progress", [])}),
    ("response.output_item.added", {"output_index": 0, "item": {**_REASONING, "encrypted_content": None}}),
    ("response.reasoning_summary_text.delta", {"output_index": 0, "delta": "Hm"}),
    ("response.output_item.done", {"output_index": 0, "item": _REASONING}),
    ("response.output_text.delta", {"output_index": 1, "delta": "Hi"}),
    ("response.output_text.delta", {"output_index": 1, "delta": " \"there\""}),
    ("response.some_new_event", {"output_index": 1, "extra": [1, 2]}),
    ("response.output_item.added", {"output_index": 2, "item": {**_CALL, "arguments": ""}}),
    ("response.function_call_arguments.delta", {"output_index": 2, "delta": "{}"}),
    ("response.completed", {"response": _response("completed", [_REASONING, _CALL])}),
])] + [b'{"type":"response.output_text.delta","delta":"cut']  # malformed


def _one_by_one(native: MessagesPassThrough | ResponsesPassThrough, payloads: list[bytes]) -> tuple[int, list[Any]]:
    """What `events()` makes of the payloads one at a time: their token chunks, and every other chunk."""
    tokens, others = 0, []
    for payload in payloads:
        chunks = native.events(payload)
        if chunks is ANSWER_TOKEN or chunks is REASONING_TOKEN:
            tokens += 1
        else:
            others += [None] if chunks is None else chunks
    return tokens, others


@pytest.mark.parametrize("whole", [True, False])
@pytest.mark.parametrize("kind", ["messages", "responses"])
def test_a_read_taken_whole_counts_and_keeps_what_its_events_one_by_one_do(kind: str, whole: bool) -> None:
    """`read()` takes a network read's events in one call (the deltas handled inline, their tokens
    counted over them all): the same tokens, the same chunks for the meter, and the same bytes for a
    streaming client or answer for a JSON one as `events()` gives them one by one -- however the
    stream is cut into reads."""
    make, payloads = ((lambda: MessagesPassThrough("public-model", whole)), STREAM) if kind == "messages" else \
        ((lambda: ResponsesPassThrough("public-model", whole)), RESPONSES)
    single = make()
    tokens, others = _one_by_one(single, payloads)
    sent, whole_answer = single.take(), single.result()
    for cuts in ([], [3], [1, 4, 9], list(range(1, len(payloads)))):
        batched = make()
        batched.head.created = single.head.created  # (chunks say when their translator was made)
        counted, answered, chunks = 0, False, []
        for start, end in zip([0, *cuts], [*cuts, len(payloads)], strict=True):
            n, answer, more = batched.read(payloads[start:end])
            counted, answered, chunks = counted + n, answered or answer, chunks + more
        assert (counted, answered) == (tokens, True)
        assert orjson.dumps(chunks) == orjson.dumps(others)  # (fresh chunk dicts: compared as JSON)
        assert batched.take() == sent and (sent == b"") == whole
        assert batched.result() == whole_answer
        assert batched.served_tier == single.served_tier is not None


async def test_a_pass_through_stream_is_metered_from_its_reads_whole() -> None:
    """The meter of a pass-through stream read in one network read: every token (a tool call's start
    among them), the usage the upstream reported, its end and its malformed event."""
    endpoint = _endpoint()
    raw = b"".join(b"event: x\ndata: " + payload + b"\n\n" for payload in STREAM)
    stream = TranslatedStream(endpoint, _Reads(raw), Meter(t_sent=time.perf_counter()), 5.0,
                              translator=MessagesPassThrough("public-model", True))
    await stream.open_gate(5.0)
    while await stream.next_batch() is not None:
        pass
    meter = stream.meter
    # 2 thinking, 3 text (the malformed delta's bytes say text_delta), the tool_use start, 2 of its input
    assert meter.token_chunks == 8 and meter.t_first_answer is not None and meter.done
    assert meter.usage is not None and meter.usage["completion_tokens"] == 6 and not meter.usage_estimated
    assert stream.served_tier == "fast" and stream.native is not None
    assert stream.native.result()["content"][2]["input"] == {"city": "Paris"}


def test_events_naming_the_model_are_streamed_as_they_came_but_for_the_name() -> None:
    """The events that name the model (Messages' message_start, Responses' response.* ones) reach a
    streaming client byte for byte, escapes as the upstream wrote them, only the model renamed."""
    start = (b'{"type":"message_start","message":{"id":"msg_1","model":"upstream-model","content":[],'
             b'"usage":{"input_tokens":1},"note":"caf\\u00e9"}}')
    messages = MessagesPassThrough("public-model", whole=False)
    messages.read([start])
    renamed = start.replace(b"upstream-model", b"public-model")
    assert messages.take() == b"event: message_start\ndata: " + renamed + b"\n\n"
    events = [b'{"type":"%s","response":{"id":"resp_1","model":"upstream-model","status":"in_progress",'
              b'"output":[],"note":"caf\\u00e9"}}' % kind for kind in (b"response.created", b"response.in_progress")]
    responses = ResponsesPassThrough("public-model", whole=False)
    responses.read(events)
    kinds = (b"response.created", b"response.in_progress")
    renamed_events = [e.replace(b"upstream-model", b"public-model") for e in events]
    assert responses.take() == b"".join(b"event: %s\ndata: %s\n\n" % pair
                                        for pair in zip(kinds, renamed_events, strict=True))
    assert responses.head.model == "public-model"


def test_a_read_of_deltas_counts_each_kind_of_token() -> None:
    """Text, tool input and thinking deltas are tokens (the first two answer), others are not: read in
    one call, text alone or mixed with the others."""
    text = _delta(0, {"type": "text_delta", "text": "a"})
    thinking = _delta(0, {"type": "thinking_delta", "thinking": "b"})
    tool = _delta(1, {"type": "input_json_delta", "partial_json": "{"})
    signature = _delta(0, {"type": "signature_delta", "signature": "c2ln"})
    reads = {(text, text): (2, True), (thinking, thinking): (2, False), (thinking, signature): (1, False),
             (text, signature): (1, True), (thinking, tool, text): (3, True), (signature,): (0, False)}
    for read, counted in reads.items():
        for whole in (True, False):
            assert MessagesPassThrough("public-model", whole).read(list(read))[:2] == counted, read


def _parsed_by(monkeypatch: pytest.MonkeyPatch, module: Any) -> list[bytes]:
    """The payloads `module` parses as JSON from now on."""
    parsed: list[bytes] = []
    real = module.loads
    monkeypatch.setattr(module, "loads", lambda payload: parsed.append(payload) or real(payload))
    return parsed


@pytest.mark.parametrize("whole", [True, False])
def test_a_responses_pass_through_parses_only_the_events_it_needs(monkeypatch: pytest.MonkeyPatch,
                                                                   whole: bool) -> None:
    """What translates to nothing is not parsed: an added item other than a function call (passed on
    byte for byte), and for a JSON client the created response too (it needs the final one alone).
    A function call's added item still is (its tool-call start is a token)."""
    from gateway.upstreams import openai_responses
    parsed = _parsed_by(monkeypatch, openai_responses)
    native = ResponsesPassThrough("public-model", whole)
    tokens, answered, chunks = native.read(RESPONSES)
    assert [orjson.loads(p)["type"] for p in parsed] == [*([] if whole else ["response.created"]),
                                                       "response.some_new_event", "response.output_item.added",
                                                       "response.completed"]
    assert orjson.loads(parsed[-2])["item"]["type"] == "function_call"
    assert tokens == 5 and answered and native.served_tier == "priority"  # (the malformed delta's bytes are one)
    assert sum(1 for c in chunks if c and c.get("choices") and c["choices"][0]["delta"].get("tool_calls")) == 1
    if not whole:  # the reasoning item's added event, as it came
        assert b"event: response.output_item.added\ndata: " + RESPONSES[2] + b"\n\n" in native.take()
    else:
        assert native.result()["model"] == "public-model" and native.result()["output"][1] == _CALL


def test_a_messages_pass_through_does_not_parse_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """message_stop is the end, with nothing to read: not parsed, passed on as it came."""
    from gateway.upstreams import anthropic
    parsed = _parsed_by(monkeypatch, anthropic)
    for whole in (True, False):
        native = MessagesPassThrough("public-model", whole)
        assert native.read([STREAM[-1]]) == (0, False, [END])
        assert native.take() == (b"" if whole else b"event: message_stop\ndata: " + STREAM[-1] + b"\n\n")
    assert parsed == []
