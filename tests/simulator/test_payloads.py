"""Tests of gateway.simulator.payloads: exact SSE chunk and completion shapes."""

from __future__ import annotations

import orjson

from gateway.simulator.chat_request import ChatJob
from gateway.simulator.content import TOKEN_TEXT
from gateway.simulator.payloads import DONE, ChunkWriter, completion_body


def job(include_usage: bool) -> ChatJob:
    return ChatJob(
        model="m",
        stream=True,
        include_usage=include_usage,
        reasoning_ids=bytes([1]),
        answer_ids=bytes([2, 3]),
        finish_reason="stop",
        prefix_tokens=0,
        prompt_tokens=9,
        cached_tokens=4,
    )


def events(data: bytes) -> list[bytes]:
    assert data.endswith(b"\n\n")
    return [e.removeprefix(b"data: ") for e in data.split(b"\n\n") if e]


def test_token_chunks_parse_and_carry_role_once() -> None:
    writer = ChunkWriter(job(include_usage=True))
    first, second, third = (orjson.loads(writer.token(i)[6:]) for i in range(3))
    assert first["object"] == "chat.completion.chunk" and first["model"] == "m"
    assert first["id"].startswith("chatcmpl-") and first["id"] == third["id"]
    assert first["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "reasoning_content": TOKEN_TEXT[1]},
            "finish_reason": None,
        }
    ]
    assert second["choices"][0]["delta"] == {"content": TOKEN_TEXT[2]}
    assert third["usage"] is None  # include_usage: every chunk has "usage": null
    assert "usage" not in orjson.loads(ChunkWriter(job(include_usage=False)).token(0)[6:])


def test_finish_usage_and_done() -> None:
    parts = events(ChunkWriter(job(include_usage=True)).finish(with_done=True))
    final, usage_chunk, done = parts
    assert orjson.loads(final)["choices"][0] == {"index": 0, "delta": {}, "finish_reason": "stop"}
    usage = orjson.loads(usage_chunk)
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": 9,
        "completion_tokens": 3,
        "total_tokens": 12,
        "prompt_tokens_details": {"cached_tokens": 4},
        "completion_tokens_details": {"reasoning_tokens": 1},
    }
    assert b"data: " + done + b"\n\n" == DONE
    assert len(events(ChunkWriter(job(include_usage=False)).finish(with_done=False))) == 1
    empty = orjson.loads(ChunkWriter(job(include_usage=False)).empty_first()[6:])
    assert empty["choices"][0]["delta"] == {"role": "assistant", "content": ""}


def test_completion_body() -> None:
    body = orjson.loads(completion_body(job(include_usage=False)))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": TOKEN_TEXT[2] + TOKEN_TEXT[3],
        "reasoning_content": TOKEN_TEXT[1],
    }
    assert body["usage"]["completion_tokens"] == 3
