"""Byte-exact OpenAI wire payloads for the simulator: SSE chunks, completions, usage, errors.

Does: build `chat.completion.chunk` SSE events (from precomputed byte templates so a token costs
one concatenation, not a JSON dump), the final chunk, the usage chunk, `[DONE]`, the
non-streaming `chat.completion` object and OpenAI-shaped error bodies.
Does not: decide what to send or when (see `endpoint.py`), or touch sockets.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import orjson

from gateway.simulator.content import TOKEN_JSON, render

if TYPE_CHECKING:  # chat_request imports error_body from here
    from gateway.simulator.chat_request import ChatJob

DONE = b"data: [DONE]\n\n"
MALFORMED = b"data: {not json\n\n"


def new_chat_id() -> str:
    return "chatcmpl-sim" + os.urandom(10).hex()


def error_body(message: str, type_: str, code: str | int | None, param: str | None = None) -> bytes:
    return orjson.dumps({"error": {"message": message, "type": type_, "param": param, "code": code}})


class ChunkWriter:
    """SSE events of one streamed completion. Token i counts reasoning tokens first, then answer."""

    def __init__(self, job: ChatJob) -> None:
        self._job = job
        self._n_reasoning = len(job.reasoning_ids)
        kind = b"text_completion" if job.kind == "completions" else b"chat.completion.chunk"
        # The served tier, as OpenAI reports it on every chunk, when one was asked for.
        tier = b'"service_tier":%b,' % orjson.dumps(job.served_tier) if job.served_tier else b""
        head = b'data: {"id":%b,"object":"%b","created":%d,"model":%b,%b"choices":[' % (
            orjson.dumps(new_chat_id()),
            kind,
            int(time.time()),
            orjson.dumps(job.model),
            tier,
        )
        self._head = head
        self._delta = head + b'{"index":0,"delta":{'
        # OpenAI sends `"usage": null` on every chunk when include_usage is on.
        self._usage_null = b',"usage":null' if job.include_usage else b""
        self._tail = b'},"finish_reason":null}]' + self._usage_null + b"}\n\n"
        if job.kind == "completions":  # legacy chunks: `text` in the choice, no delta
            self._delta = head + b'{"index":0,"logprobs":null,'
            self._tail = b',"finish_reason":null}]' + self._usage_null + b"}\n\n"

    def _structured(self, i: int) -> bytes:
        s = self._job.structured
        assert s is not None
        piece = orjson.dumps(s.pieces[i])
        if s.kind != "tool_call":
            role = b'"role":"assistant",' if i == 0 else b""
            return self._delta + role + b'"content":' + piece + self._tail
        if i == 0:
            call = b'{"index":0,"id":%b,"type":"function","function":{"name":%b,"arguments":%b}}' % (
                orjson.dumps(s.call_id), orjson.dumps(s.tool_name), piece)
            return self._delta + b'"role":"assistant","content":null,"tool_calls":[' + call + b"]" + self._tail
        return self._delta + b'"tool_calls":[{"index":0,"function":{"arguments":' + piece + b"}}]" + self._tail

    def token(self, i: int) -> bytes:
        if self._job.structured is not None:
            return self._structured(i)
        if self._job.kind == "completions":
            return self._delta + b'"text":' + TOKEN_JSON[self._job.answer_ids[i - self._n_reasoning]] + self._tail
        role = b'"role":"assistant",' if i == 0 else b""
        if i < self._n_reasoning:
            word = TOKEN_JSON[self._job.reasoning_ids[i]]
            return self._delta + role + b'"reasoning_content":' + word + self._tail
        word = TOKEN_JSON[self._job.answer_ids[i - self._n_reasoning]]
        return self._delta + role + b'"content":' + word + self._tail

    def empty_first(self) -> bytes:
        """The opening chunk of an answer with no tokens at all."""
        return self._delta + b'"role":"assistant","content":""' + self._tail

    def finish(self, with_done: bool) -> bytes:
        close = b'"text":""' if self._job.kind == "completions" else b"}"
        out = (
            self._delta
            + close + b',"finish_reason":"%b"}]' % self._job.finish_reason.encode()
            + self._usage_null
            + b"}\n\n"
        )
        if self._job.include_usage:
            out += self._head + b'],"usage":' + orjson.dumps(self._job.usage()) + b"}\n\n"
        if with_done:
            out += DONE
        return out


def completion_body(job: ChatJob) -> bytes:
    if job.kind == "completions":
        return orjson.dumps({"id": new_chat_id(), "object": "text_completion", "created": int(time.time()),
                             "model": job.model, "usage": job.usage(), "choices": [
                                 {"index": 0, "text": render(job.answer_ids), "logprobs": None,
                                  "finish_reason": job.finish_reason}]})
    message: dict[str, Any] = {"role": "assistant", "content": render(job.answer_ids)}
    s = job.structured
    if s is not None and s.kind != "tool_call":
        message["content"] = s.text
    elif s is not None:
        message["content"] = None
        message["tool_calls"] = [{"id": s.call_id, "type": "function",
                                  "function": {"name": s.tool_name, "arguments": s.text}}]
    if job.reasoning_ids:
        message["reasoning_content"] = render(job.reasoning_ids)
    body: dict[str, Any] = {
        "id": new_chat_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": job.model,
        "choices": [{"index": 0, "message": message, "finish_reason": job.finish_reason, "logprobs": None}],
        "usage": job.usage(),
    }
    if job.served_tier:
        body["service_tier"] = job.served_tier
    return orjson.dumps(body)


def sse(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"
