"""Anthropic Messages and OpenAI Responses wire payloads for the simulator: stream events and bodies.

Does: the writers `MessagesWriter` and `ResponsesWriter`, with the same methods as payloads.py's
`ChunkWriter` (token i, the empty opening, the finish), emitting the real event sequences:
  Messages   message_start (usage with cache tokens and `speed`), ping; per block content_block_start,
             content_block_delta (thinking_delta then signature_delta; text_delta; input_json_delta),
             content_block_stop; message_delta (stop_reason, usage); message_stop.
  Responses  response.created, response.in_progress; per output item output_item.added, its parts and
             deltas (reasoning summary text, output_text, function_call_arguments), their .done
             events, output_item.done (a reasoning item with encrypted_content when asked);
             response.completed or response.incomplete (usage, `service_tier`).
The non-streamed `message` and `response` objects; Anthropic-shaped error bodies and error events.
Does not: decide what to send or when (endpoint.py).
"""

from __future__ import annotations

import base64
import hashlib
import os
import time
from typing import Any

import orjson

from gateway.simulator.chat_request import ChatJob
from gateway.simulator.content import TOKEN_TEXT

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    529: "overloaded_error"}


def anthropic_error_body(status: int, message: str) -> bytes:
    kind = ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return orjson.dumps({"type": "error", "error": {"type": kind, "message": message},
                         "request_id": "req_sim" + os.urandom(6).hex()})


def named(kind: str, payload: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(payload) + b"\n\n"


def error_event(kind: str, status: int, message: str) -> bytes:
    if kind == "messages":
        return b"event: error\ndata: " + anthropic_error_body(status, message) + b"\n\n"
    return named("error", {"type": "error", "code": "server_error", "message": message, "param": None,
                           "sequence_number": 0})


def _piece(job: ChatJob, i: int) -> tuple[str, str]:
    """Token i: ("reasoning" | "text" | "tool" | "json", its text)."""
    nr = len(job.reasoning_ids)
    if i < nr:
        return "reasoning", TOKEN_TEXT[job.reasoning_ids[i]]
    s = job.structured
    if s is not None:
        return ("tool" if s.kind == "tool_call" else "text"), s.pieces[i - nr]
    return "text", TOKEN_TEXT[job.answer_ids[i - nr]]


def signature(text: str) -> str:
    """A stand-in for Anthropic's opaque thinking signature (and OpenAI's encrypted_content)."""
    return base64.b64encode(hashlib.sha256(text.encode()).digest() * 2).decode()


def _tokens(job: ChatJob) -> tuple[int, int, int]:
    """Input tokens not cached, cache reads, cache writes."""
    cached = job.cached_tokens
    written = job.prompt_tokens - cached if job.cache_write else 0
    return job.prompt_tokens - cached - written, cached, written


class MessagesWriter:
    """Anthropic Messages stream events of one answer."""

    def __init__(self, job: ChatJob) -> None:
        self._job = job
        self.id = "msg_sim" + os.urandom(10).hex()
        self._index = -1
        self._kind: str | None = None
        self._text: list[str] = []
        self.blocks: list[dict[str, Any]] = []  # closed blocks, for the non-streamed message

    def _usage(self, output: int) -> dict[str, Any]:
        fresh, read, written = _tokens(self._job)
        hour = self._job.cache_write_1h
        return {"input_tokens": fresh, "cache_creation_input_tokens": written, "cache_read_input_tokens": read,
                "cache_creation": {"ephemeral_5m_input_tokens": 0 if hour else written,
                                   "ephemeral_1h_input_tokens": written if hour else 0},
                "output_tokens": output, "service_tier": "standard", "speed": self._job.served_tier}

    def _start(self) -> bytes:
        message = {"id": self.id, "type": "message", "role": "assistant", "model": self._job.model, "content": [],
                   "stop_reason": None, "stop_sequence": None, "usage": self._usage(1)}
        return named("message_start", {"type": "message_start", "message": message}) + named("ping", {"type": "ping"})

    def _close(self) -> bytes:
        if self._kind is None:
            return b""
        out = b""
        text = "".join(self._text)
        if self._kind == "reasoning":
            sig = signature(text)
            out += named("content_block_delta", {"type": "content_block_delta", "index": self._index,
                                                 "delta": {"type": "signature_delta", "signature": sig}})
            self.blocks.append({"type": "thinking", "thinking": text, "signature": sig})
        elif self._kind == "tool":
            s = self._job.structured
            assert s is not None
            self.blocks.append({"type": "tool_use", "id": "toolu_" + s.call_id[5:], "name": s.tool_name,
                                "input": orjson.loads(s.text or "{}")})
        else:
            self.blocks.append({"type": "text", "text": text})
        self._kind, self._text = None, []
        return out + named("content_block_stop", {"type": "content_block_stop", "index": self._index})

    def _open(self, kind: str) -> bytes:
        out = self._close()
        self._index += 1
        self._kind = kind
        if kind == "reasoning":
            block: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == "tool":
            s = self._job.structured
            assert s is not None
            block = {"type": "tool_use", "id": "toolu_" + s.call_id[5:], "name": s.tool_name, "input": {}}
        else:
            block = {"type": "text", "text": ""}
        return out + named("content_block_start", {"type": "content_block_start", "index": self._index,
                                                   "content_block": block})

    def token(self, i: int) -> bytes:
        kind, text = _piece(self._job, i)
        out = self._start() if i == 0 else b""
        if kind != self._kind:
            out += self._open(kind)
        self._text.append(text)
        if kind == "reasoning":
            delta = {"type": "thinking_delta", "thinking": text}
        elif kind == "tool":
            delta = {"type": "input_json_delta", "partial_json": text}
        else:
            delta = {"type": "text_delta", "text": text}
        return out + named("content_block_delta", {"type": "content_block_delta", "index": self._index,
                                                   "delta": delta})

    def empty_first(self) -> bytes:
        return self._start()

    def finish(self, with_done: bool = True) -> bytes:
        out = self._close()
        usage = self._usage(self._job.n_tokens)
        delta = {"stop_reason": STOP_REASONS.get(self._job.finish_reason, "end_turn"), "stop_sequence": None}
        out += named("message_delta", {"type": "message_delta", "delta": delta, "usage": usage})
        return out + named("message_stop", {"type": "message_stop"})

    def body(self) -> bytes:
        """The non-streamed `message` object."""
        for i in range(self._job.n_tokens):
            self.token(i)
        self._close()
        return orjson.dumps({"id": self.id, "type": "message", "role": "assistant", "model": self._job.model,
                             "content": self.blocks,
                             "stop_reason": STOP_REASONS.get(self._job.finish_reason, "end_turn"),
                             "stop_sequence": None, "usage": self._usage(self._job.n_tokens)})


class ResponsesWriter:
    """OpenAI Responses stream events of one answer."""

    def __init__(self, job: ChatJob) -> None:
        self._job = job
        self.id = "resp_sim" + os.urandom(10).hex()
        self._created = int(time.time())
        self._seq = 0
        self._kind: str | None = None
        self._item: dict[str, Any] = {}
        self._text: list[str] = []
        self.items: list[dict[str, Any]] = []

    def _ev(self, kind: str, **fields: Any) -> bytes:
        fields["sequence_number"] = self._seq
        self._seq += 1
        return named(kind, {"type": kind, **fields})

    def response(self, status: str) -> dict[str, Any]:
        job = self._job
        out: dict[str, Any] = {
            "id": self.id, "object": "response", "created_at": self._created, "status": status, "model": job.model,
            "output": list(self.items), "error": None, "incomplete_details": None, "instructions": None,
            "metadata": {}, "parallel_tool_calls": True, "temperature": 1.0, "top_p": 1.0, "tool_choice": "auto",
            "tools": [], "service_tier": job.served_tier, "store": False}
        if status in ("completed", "incomplete"):
            n, nr = job.n_tokens, len(job.reasoning_ids)
            out["usage"] = {"input_tokens": job.prompt_tokens, "input_tokens_details": {"cached_tokens":
                            job.cached_tokens}, "output_tokens": n, "output_tokens_details": {"reasoning_tokens": nr},
                            "total_tokens": job.prompt_tokens + n}
        if status == "incomplete":
            out["incomplete_details"] = {"reason": "max_output_tokens"}
        return out

    def _where(self) -> dict[str, Any]:
        return {"item_id": self._item["id"], "output_index": len(self.items)}

    def _close(self) -> bytes:
        if self._kind is None:
            return b""
        text, item, where = "".join(self._text), self._item, self._where()
        if self._kind == "reasoning":
            part = {"type": "summary_text", "text": text}
            out = self._ev("response.reasoning_summary_text.done", **where, summary_index=0, text=text)
            out += self._ev("response.reasoning_summary_part.done", **where, summary_index=0, part=part)
            item["summary"] = [part]
            if self._job.encrypted_reasoning:
                item["encrypted_content"] = signature(text)
        elif self._kind == "tool":
            out = self._ev("response.function_call_arguments.done", **where, arguments=text)
            item.update(arguments=text, status="completed")
        else:
            part = {"type": "output_text", "text": text, "annotations": []}
            out = self._ev("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            out += self._ev("response.content_part.done", **where, content_index=0, part=part)
            item.update(content=[part], status="completed")
        out += self._ev("response.output_item.done", output_index=len(self.items), item=item)
        self.items.append(item)
        self._kind, self._text = None, []
        return out

    def _open(self, kind: str) -> bytes:
        out = self._close()
        self._kind = kind
        suffix = os.urandom(8).hex()
        if kind == "reasoning":
            self._item = {"id": "rs_" + suffix, "type": "reasoning", "summary": []}
        elif kind == "tool":
            s = self._job.structured
            assert s is not None
            self._item = {"id": "fc_" + suffix, "type": "function_call", "call_id": s.call_id, "name": s.tool_name,
                          "arguments": "", "status": "in_progress"}
        else:
            self._item = {"id": "msg_" + suffix, "type": "message", "role": "assistant", "status": "in_progress",
                          "content": []}
        out += self._ev("response.output_item.added", output_index=len(self.items), item=dict(self._item))
        if kind == "reasoning":
            out += self._ev("response.reasoning_summary_part.added", **self._where(), summary_index=0,
                            part={"type": "summary_text", "text": ""})
        elif kind == "text":
            out += self._ev("response.content_part.added", **self._where(), content_index=0,
                            part={"type": "output_text", "text": "", "annotations": []})
        return out

    def _start(self) -> bytes:
        start = self.response("in_progress")
        return self._ev("response.created", response=start) + self._ev("response.in_progress", response=start)

    def token(self, i: int) -> bytes:
        kind, text = _piece(self._job, i)
        out = self._start() if i == 0 else b""
        if kind != self._kind:
            out += self._open(kind)
        self._text.append(text)
        where = self._where()
        if kind == "reasoning":
            return out + self._ev("response.reasoning_summary_text.delta", **where, summary_index=0, delta=text)
        if kind == "tool":
            return out + self._ev("response.function_call_arguments.delta", **where, delta=text)
        return out + self._ev("response.output_text.delta", **where, content_index=0, delta=text, logprobs=[])

    def empty_first(self) -> bytes:
        return self._start()

    def _status(self) -> str:
        return "incomplete" if self._job.finish_reason == "length" else "completed"

    def finish(self, with_done: bool = True) -> bytes:
        out = self._close()
        status = self._status()
        return out + self._ev(f"response.{status}", response=self.response(status))

    def body(self) -> bytes:
        """The non-streamed `response` object."""
        for i in range(self._job.n_tokens):
            self.token(i)
        self._close()
        return orjson.dumps(self.response(self._status()))


def native_writer(job: ChatJob) -> MessagesWriter | ResponsesWriter:
    return MessagesWriter(job) if job.kind == "messages" else ResponsesWriter(job)
