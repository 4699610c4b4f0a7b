"""`MessageAnswer`: a Messages JSON answer assembled from its stream's deltas, a run of one block's
compact deltas decoded in one call, and every other form of delta parsed on its own -- the same
message either way."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from gateway.upstreams import messages_answer
from gateway.upstreams.messages_answer import MessageAnswer, compact


def _delta(index: int, kind: str, key: str, text: str) -> bytes:
    return orjson.dumps({"type": "content_block_delta", "index": index, "delta": {"type": kind, key: text}})


def _start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _one_by_one(starts: list[dict[str, Any]], payloads: list[bytes]) -> dict[str, Any]:
    """The oracle: every delta parsed on its own (a malformed one left out)."""
    answer = MessageAnswer()
    for start in starts:
        answer.event(start)
    for payload in payloads:
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        answer.event(event)
    return answer.result()


def test_compact_says_a_delta_s_prefix_index_and_field_and_nothing_of_other_forms() -> None:
    text = _delta(12, "text_delta", "text", "hi")
    assert compact(text) == (text[:-5], 12, "text")
    assert compact(_delta(0, "thinking_delta", "thinking", "x"))[1:] == (0, "thinking")  # type: ignore[index]
    assert compact(_delta(1, "input_json_delta", "partial_json", "{"))[1:] == (1, "partial_json")  # type: ignore[index]
    assert compact(_delta(0, "signature_delta", "signature", "c2ln")) is None
    assert compact(b'{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}}') is None
    assert compact(b'{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"a"}}') is None
    assert compact(b'{"type":"content_block_delta","index":"0","delta":{"type":"text_delta","text":"a"}}') is None


TEXTS = ["Hello", ', "world"\n', "caf\u00e9 \U0001f600", "back\\slash", "\t", "", "end"]


@pytest.mark.parametrize("payloads", [
    [_delta(0, "text_delta", "text", t) for t in TEXTS],
    # Escapes written as the upstream may write them (not as orjson would): \u escapes, \/.
    [b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf\\u00e9 \\/"}}',
     b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\\ud83d\\ude00"}}'],
    # A piece ending in an escaped backslash, one with an extra field, a malformed one, one that would
    # join its neighbour's string, spaced JSON, a signature: each parsed on its own, the others kept.
    [_delta(0, "text_delta", "text", "a\\"), _delta(0, "text_delta", "text", "n")],
    [_delta(0, "text_delta", "text", "a"),
     b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b","x":1}}',
     _delta(0, "text_delta", "text", "c")],
    [_delta(0, "text_delta", "text", "a"),
     b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"lost\\"}}',
     _delta(0, "text_delta", "text", "c")],
    [b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x","y":"',
     b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"z"}}'],
    [b'{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "a"}}',
     _delta(0, "text_delta", "text", "b")],
    [_delta(1, "thinking_delta", "thinking", "Let me "), _delta(1, "thinking_delta", "thinking", "think."),
     _delta(1, "signature_delta", "signature", "c2ln")],
    [_delta(2, "input_json_delta", "partial_json", '{"city": '),
     _delta(2, "input_json_delta", "partial_json", '"Paris"}')],
    # Cut short where a boundary could be misread: a delta ending `"}` only, one whose string's end is
    # its prefix's own quote, one with a raw NUL, a boundary pattern inside a string.
    [_delta(0, "text_delta", "text", "a"),
     b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b"} }',
     _delta(0, "text_delta", "text", "c")],
    [_delta(0, "text_delta", "text", "a"),
     b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"}}',
     _delta(0, "text_delta", "text", "c")],
    [_delta(0, "text_delta", "text", "a"),
     b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"b"}}\x00'
     b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"c"}}'],
    [_delta(0, "text_delta", "text", 'x"}}\x00{"type":"content_block_delta"'), _delta(0, "text_delta", "text", "y")],
    # Deltas of a block that never started: left out.
    [_delta(7, "text_delta", "text", "nowhere"), _delta(0, "text_delta", "text", "here")],
])
def test_a_run_of_deltas_makes_the_message_its_deltas_one_by_one_make(payloads: list[bytes]) -> None:
    starts = [_start(0, {"type": "text", "text": ""}), _start(1, {"type": "thinking", "thinking": "", "signature": ""}),
              _start(2, {"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}})]
    answer = MessageAnswer()
    for start in starts:
        answer.event(start)
    answer.deltas(payloads)
    assert answer.result() == _one_by_one(starts, payloads)


def test_a_run_of_one_block_s_compact_deltas_is_decoded_in_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[bytes] = []
    monkeypatch.setattr(messages_answer, "loads", lambda payload: parsed.append(payload))
    answer = MessageAnswer()
    answer.event(_start(0, {"type": "text", "text": ""}))
    answer.deltas([_delta(0, "text_delta", "text", t) for t in TEXTS])
    assert parsed == []  # none parsed as an event of its own
    assert answer.result()["content"] == [{"type": "text", "text": "".join(TEXTS)}]


def test_a_run_says_the_field_it_was_decoded_into_in_one_call_or_none() -> None:
    """What the reader counts a run's tokens by: decoded in one call, all of it one kind."""
    answer = MessageAnswer()
    answer.event(_start(0, {"type": "text", "text": ""}))
    answer.event(_start(1, {"type": "thinking", "thinking": "", "signature": ""}))
    assert answer.deltas([_delta(0, "text_delta", "text", t) for t in TEXTS]) == "text"
    assert answer.deltas([_delta(1, "thinking_delta", "thinking", "a")]) == "thinking"
    assert answer.deltas([_delta(1, "thinking_delta", "thinking", "a"),
                          _delta(1, "signature_delta", "signature", "c2ln")]) is None
    assert answer.deltas([_delta(0, "text_delta", "text", "a"), _delta(1, "thinking_delta", "thinking", "b")]) is None
