"""Anthropic Messages answers from chat-completion chunks: the `message` object and its stream.

Pure: chunks (dicts) in, JSON or named server-sent events out (the Anthropic SDK reads the `event:`
line). Content blocks are `text` and `tool_use` (a chat tool call; its JSON arguments become
`input`). Reasoning is not rendered: Anthropic's `thinking` blocks carry a signature no open model
produces. Finish reasons map stop -> end_turn, length -> max_tokens, tool_calls -> tool_use.

Stream: message_start (its usage: the input tokens estimated from the request, as Anthropic puts
its count there), then per block content_block_start, content_block_delta (text_delta or
input_json_delta) ..., content_block_stop; message_delta with stop_reason and the usage the gateway
charged (the upstream's, else its estimate, `"estimated": true`); message_stop.
A failure after message_start ends the stream with an `error` event in Anthropic's shape.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.apis.adapter import answer_pieces, sse_event
from gateway.errors import GatewayError, anthropic_error_object
from gateway.upstreams.anthropic import tool_input

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}


def new_message_id() -> str:
    return f"msg_{os.urandom(12).hex()}"


def stop_reason(finish_reason: str | None) -> str:
    return STOP_REASONS.get(finish_reason or "stop", "end_turn")


def usage_of(usage: dict[str, Any] | None) -> dict[str, Any]:
    """Anthropic's usage object from a chat one; `"estimated": true` kept where the gateway estimated it."""
    usage = usage or {}
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    out = {"input_tokens": int(usage.get("prompt_tokens") or 0) - cached, "output_tokens":
           int(usage.get("completion_tokens") or 0), "cache_creation_input_tokens": 0,
           "cache_read_input_tokens": cached}
    if usage.get("estimated"):
        out["estimated"] = True
    return out


def message_object(message_id: str, model: str, content: list[dict[str, Any]], stop: str | None,
                   usage: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": stop, "stop_sequence": None, "usage": usage}


def render_message(completion: dict[str, Any], model: str) -> dict[str, Any]:
    """A `message` object from an assembled `chat.completion`."""
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    content: list[dict[str, Any]] = []
    if message.get("content"):
        content.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_{os.urandom(8).hex()}",
                        "name": function.get("name", ""), "input": tool_input(function.get("arguments", ""))})
    return message_object(new_message_id(), model, content, stop_reason(choice.get("finish_reason")),
                          usage_of(completion.get("usage")))


@dataclass(slots=True)
class _Block:
    index: int
    kind: str  # "text" or "tool_use"
    tool_index: int | None = None


class MessagesStream:
    """The Messages event stream of one answer (a `StreamRenderer`)."""

    def __init__(self, model: str, input_estimate: int = 0) -> None:
        self.model = model
        self.input_estimate = input_estimate
        self.id = new_message_id()
        self._blocks = 0
        self._open: _Block | None = None
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None
        self._done = False

    @staticmethod
    def _event(kind: str, **fields: Any) -> bytes:
        return sse_event(kind, orjson.dumps({"type": kind, **fields}))

    def start(self) -> bytes:
        # The upstream's count comes only at the end (its usage chunk): message_delta carries it then.
        start = message_object(self.id, self.model, [], None, {"input_tokens": self.input_estimate, "output_tokens": 0,
                                                                "cache_creation_input_tokens": 0,
                                                                "cache_read_input_tokens": 0})
        return self._event("message_start", message=start) + self._event("ping")

    def _close(self) -> list[bytes]:
        block, self._open = self._open, None
        return [] if block is None else [self._event("content_block_stop", index=block.index)]

    def _start_block(self, kind: str, content_block: dict[str, Any], tool_index: int | None = None) -> list[bytes]:
        out = self._close()
        self._open = _Block(self._blocks, kind, tool_index)
        self._blocks += 1
        out.append(self._event("content_block_start", index=self._open.index, content_block=content_block))
        return out

    def feed(self, chunks: list[dict[str, Any]]) -> bytes:
        out: list[bytes] = []
        for kind, value in answer_pieces(chunks):
            if kind == "usage":
                self._usage = value
            elif kind == "finish":
                self._finish = value
            elif kind == "text":
                if self._open is None or self._open.kind != "text":
                    out += self._start_block("text", {"type": "text", "text": ""})
                assert self._open is not None
                out.append(self._event("content_block_delta", index=self._open.index,
                                       delta={"type": "text_delta", "text": value}))
            elif kind == "tool_call":
                if self._open is None or self._open.tool_index != value.get("index", 0):
                    function = value.get("function") or {}
                    block = {"type": "tool_use", "id": value.get("id") or f"toolu_{os.urandom(8).hex()}",
                             "name": function.get("name") or "", "input": {}}
                    out += self._start_block("tool_use", block, value.get("index", 0))
                assert self._open is not None
                arguments = (value.get("function") or {}).get("arguments")
                if arguments:
                    out.append(self._event("content_block_delta", index=self._open.index,
                                           delta={"type": "input_json_delta", "partial_json": arguments}))
        return b"".join(out)  # reasoning is not rendered (see the module docstring)

    def finish(self) -> bytes:
        out = self._close()
        usage = usage_of(self._usage)
        out.append(self._event("message_delta", delta={"stop_reason": stop_reason(self._finish),
                                                       "stop_sequence": None}, usage=usage))
        out.append(self._event("message_stop"))
        self._done = True
        return b"".join(out)

    def fail(self, err: GatewayError) -> bytes:
        return self._event("error", error=anthropic_error_object(err))

    def result(self) -> dict[str, Any] | None:
        return None  # nothing is stored for the Messages API
