"""Anthropic Messages upstream (`api: anthropic`): the request from a chat body, the stream to chat chunks.

Request (`POST {base_url}/messages`): system messages -> `system`; user and assistant turns, with
image parts -> image blocks, assistant `tool_calls` -> `tool_use` blocks, `tool` messages ->
`tool_result` blocks of a user turn (consecutive turns of one role merged: Anthropic wants them
alternating); function tools -> `{name, description, input_schema}`; tool_choice and
parallel_tool_calls; max_tokens (required: the request's, else the endpoint's max_output_tokens,
else DEFAULT_MAX_TOKENS); stop -> stop_sequences; temperature, top_p. The endpoint's `service_tier`
becomes `speed`, and only `fast` adds the beta header (`FAST_BETA`): sent otherwise, some
Anthropic-compatible hosts demand fast-mode credits.

Stream: message_start (id, model, input usage, `usage.speed`), content blocks (text_delta ->
content, thinking_delta -> reasoning_content, tool_use + input_json_delta -> tool_calls), message_delta
(stop_reason -> finish_reason, output usage), message_stop -> the end (chat's `[DONE]`); an `error` event -> an error
chunk, `overloaded_error` (Anthropic's 529) as a 503.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import orjson

from gateway.config import Endpoint
from gateway.context import ChatRequest
from gateway.upstreams.messages_answer import MessageAnswer
from gateway.upstreams.passthrough import without
from gateway.upstreams.wire import (
    END,
    NO_TOKEN,
    Chunk,
    ChunkHead,
    JsonTranslator,
    Outgoing,
    PassThroughEvents,
    Read,
    chat_usage,
    error_chunk,
    loads,
)

FAST_BETA = "fast-mode-2026-02-01"
# The gateway's own fields of a Messages request (routing; `speed` is the endpoint's to set), never
# passed on; `fallbacks` (Anthropic's server-side fallback) is the gateway's to act on, not twice.
GATEWAY_FIELDS = frozenset({"provider", "speed", "models", "session_id", "route", "transforms", "usage",
                            "fallbacks"})
DEFAULT_MAX_TOKENS = 4096
FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls",
          "refusal": "content_filter", "pause_turn": "stop", "model_context_window_exceeded": "length"}
# Anthropic's error types -> the HTTP status the gateway treats them as (529 overloaded: like a 503).
ERROR_STATUS = {"overloaded_error": 503, "rate_limit_error": 429, "api_error": 500, "timeout_error": 504,
                "invalid_request_error": 400, "authentication_error": 401, "permission_error": 403,
                "not_found_error": 404, "request_too_large": 413}


def _image(part: dict[str, Any]) -> dict[str, Any]:
    url = str((part.get("image_url") or {}).get("url", ""))
    if url.startswith("data:") and ";base64," in url:
        media, data = url[5:].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media, "data": data}}
    return {"type": "image", "source": {"type": "url", "url": url}}


def _blocks(content: Any) -> list[dict[str, Any]]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, dict) and part.get("type") == "text":
            blocks.append({"type": "text", "text": str(part.get("text", ""))})
        elif isinstance(part, dict) and part.get("type") == "image_url":
            blocks.append(_image(part))
    return blocks


def _text(content: Any) -> str:
    return "".join(b["text"] for b in _blocks(content) if b["type"] == "text")


def tool_input(text: Any) -> dict[str, Any]:
    """A chat tool call's JSON arguments as Anthropic's `input` object (an empty one if the model wrote
    no object): for requests to an Anthropic endpoint and for Messages answers alike."""
    try:
        value = orjson.loads(text or "{}")
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def messages_of(chat_messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat messages -> Anthropic's system text and alternating turns."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in chat_messages:
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
            continue
        if role == "tool":
            role, blocks = "user", [{"type": "tool_result", "tool_use_id": str(message.get("tool_call_id", "")),
                                     "content": _text(message.get("content"))}]
        else:
            role = "assistant" if role == "assistant" else "user"
            blocks = _blocks(message.get("content"))
            for call in message.get("tool_calls") or ():
                function = call.get("function") or {}
                blocks.append({"type": "tool_use", "id": call.get("id") or "", "name": function.get("name", ""),
                               "input": tool_input(function.get("arguments"))})
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"] += blocks
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if not turn["content"]:
            turn["content"] = [{"type": "text", "text": ""}]
    return ("\n\n".join(s for s in system if s) or None), turns


def _tool_choice(choice: Any, parallel: Any) -> dict[str, Any] | None:
    out: dict[str, Any] | None = None
    if choice in ("auto", "none"):
        out = {"type": choice}
    elif choice == "required":
        out = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("function"), dict):
        out = {"type": "tool", "name": choice["function"].get("name", "")}
    if parallel is False:
        out = {**(out or {"type": "auto"}), "disable_parallel_tool_use": True}
    return out


def messages_body(chat: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
    """A chat completions body -> an Anthropic Messages body (always streaming)."""
    system, turns = messages_of(chat.get("messages") or [])
    max_tokens = chat.get("max_tokens") or chat.get("max_completion_tokens") or endpoint.max_output_tokens
    body: dict[str, Any] = {"model": endpoint.upstream_model, "max_tokens": max_tokens or DEFAULT_MAX_TOKENS,
                            "messages": turns, "stream": True}
    if system:
        body["system"] = system
    for name in ("temperature", "top_p"):
        if chat.get(name) is not None:
            body[name] = chat[name]
    stop = chat.get("stop")
    if stop:
        body["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    tools = [t["function"] for t in chat.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
    if tools:
        body["tools"] = [{"name": f.get("name", ""), "input_schema": f.get("parameters") or {"type": "object"},
                          **({"description": f["description"]} if f.get("description") else {})} for f in tools]
        choice = _tool_choice(chat.get("tool_choice"), chat.get("parallel_tool_calls"))
        if choice is not None:
            body["tool_choice"] = choice
    if endpoint.extra_body:
        body.update(endpoint.extra_body)
    return body


def speed_headers(endpoint: Endpoint, betas: str | None = None) -> dict[str, str] | None:
    """`anthropic-beta`: the client's values (`betas`), plus fast mode's when the endpoint asks for it."""
    values = [b.strip() for b in betas.split(",") if b.strip()] if betas else []
    if endpoint.service_tier == "fast" and FAST_BETA not in values:
        values.append(FAST_BETA)
    return {"anthropic-beta": ",".join(values)} if values else None


def passthrough_body(client: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
    """A Messages client's body as sent, for an anthropic endpoint: unknown fields kept; `model`
    the endpoint's, the gateway's own fields out, the endpoint's extra_body in, always streaming."""
    body = without(client, GATEWAY_FIELDS)
    body["model"] = endpoint.upstream_model
    body["stream"] = True
    if endpoint.extra_body:
        body.update(endpoint.extra_body)
    return body


def passes_through(request: ChatRequest) -> bool:
    """Same API in and out (a Messages client): the body as sent, lossless."""
    return request.api == "messages" and request.client_body is not None


def outgoing(request: ChatRequest, endpoint: Endpoint) -> Outgoing:
    if passes_through(request):
        body = passthrough_body(request.client_body, endpoint)  # type: ignore[arg-type]
        translator: Any = partial(MessagesPassThrough, endpoint.model, not request.stream)
    else:
        body, translator = messages_body(request.body, endpoint), MessagesTranslator
    if endpoint.service_tier is not None:
        body["speed"] = endpoint.service_tier
    return Outgoing(orjson.dumps(body), "/messages", speed_headers(endpoint, request.client_betas), translator)


class MessagesTranslator(JsonTranslator):
    """Anthropic Messages stream events -> chat-completion chunks (a `Translator`)."""

    def __init__(self) -> None:
        self.head = ChunkHead(created=int(time.time()))
        self.served_tier: str | None = None
        self._input = (0, 0, 0)  # input, cache read, cache write
        self._tools: dict[int, int] = {}  # content block index -> tool call index
        self._stop: str | None = None
        self._hour: dict[str, Any] | None = None  # message_start's cache_creation split (5m, 1h)

    def _note_usage(self, usage: Any) -> None:
        if isinstance(usage, dict) and isinstance(usage.get("speed"), str):
            self.served_tier = usage["speed"]

    def translate(self, event: dict[str, Any]) -> list[Chunk]:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            dtype = delta.get("type")
            if dtype == "text_delta":
                return [self.head.chunk({"content": delta.get("text", "")})]
            if dtype == "thinking_delta":
                return [self.head.chunk({"reasoning_content": delta.get("thinking", "")})]
            if dtype == "input_json_delta" and event.get("index") in self._tools:
                return [self.head.tool_arguments(self._tools[event["index"]], delta.get("partial_json", ""))]
            return []  # signature_delta and others: chat completions cannot carry them
        if kind == "content_block_start":
            block = event.get("content_block") or {}
            if block.get("type") == "tool_use":
                index = self._tools[event.get("index")] = len(self._tools)
                return [self.head.tool_call(index, block.get("id", ""), block.get("name", ""))]
            return []
        if kind == "message_start":
            message = event.get("message") or {}
            self.head.id, self.head.model = str(message.get("id", "")), str(message.get("model", ""))
            usage = message.get("usage") or {}
            self._note_usage(usage)
            self._input = (int(usage.get("input_tokens") or 0), int(usage.get("cache_read_input_tokens") or 0),
                           int(usage.get("cache_creation_input_tokens") or 0))
            self._hour = usage.get("cache_creation") if isinstance(usage.get("cache_creation"), dict) else None
            return [self.head.chunk({"role": "assistant", "content": ""})]
        if kind == "message_delta":
            self._stop = (event.get("delta") or {}).get("stop_reason") or self._stop
            usage = event.get("usage") or {}
            self._note_usage(usage)
            fresh, read, write = self._input
            # message_delta's usage is cumulative; input counts there, when present, are final.
            fresh = int(usage.get("input_tokens") or fresh)
            read = int(usage.get("cache_read_input_tokens") or read)
            write = int(usage.get("cache_creation_input_tokens") or write)
            total = chat_usage(fresh + read + write, int(usage.get("output_tokens") or 0), read, write)
            hour = (usage.get("cache_creation") or self._hour or {}).get("ephemeral_1h_input_tokens")
            if hour:  # the 1-hour writes among them, priced apart
                total["cache_creation_1h_input_tokens"] = int(hour)
            return [self.head.chunk(finish=FINISH.get(self._stop or "end_turn", "stop")),
                    self.head.usage_chunk(total, self.served_tier)]
        if kind == "message_stop":
            return [END]
        if kind == "error":
            error = event.get("error") or {}
            etype = error.get("type")
            return [error_chunk(str(error.get("message") or "upstream error"), ERROR_STATUS.get(etype, 502), etype)]
        return []  # ping, content_block_stop


# Events a pass-through neither parses nor changes: the deltas (one per token: what the meter needs of
# them is read in their bytes), the blocks' ends and pings. A JSON string escapes its quotes, so
# `"type":"..."` inside an event can only be a type, never text.
_DELTA = b'{"type":"content_block_delta"'
_DELTA_EVENT = b"event: content_block_delta\ndata: "
_OTHERS = {b'{"type":"content_block_stop"': b"event: content_block_stop\ndata: ",
           b'{"type":"ping"': b"event: ping\ndata: "}
_OTHER_PREFIXES = tuple(_OTHERS)
_STOP = b'{"type":"message_stop"'  # the end: nothing in it to read


class MessagesPassThrough(PassThroughEvents, MessagesTranslator):
    """Pass-through for a Messages client: every event is still translated (so it is measured),
    and kept as it came -- thinking with its signature, tool_use, unknown blocks -- for the client:
    as SSE events to `take()` while streaming, or assembled into the `message` (`result()`,
    messages_answer.py) when `whole`. Only `message.model` becomes the public name."""

    def __init__(self, model: str, whole: bool) -> None:
        MessagesTranslator.__init__(self)
        PassThroughEvents.__init__(self, model, whole)
        self._answer = MessageAnswer() if whole else None  # a streaming client gets the events

    def read(self, payloads: list[bytes]) -> Read:
        """The events of one network read, with the deltas (most of them) handled inline and their
        tokens counted in one pass over them all (whole: those of the runs the answer could not
        decode in one call; the others are counted by their form)."""
        answer = self._answer  # whole: the message the events make
        out = self._out
        deltas: list[bytes] = []
        uncounted = deltas if answer is None else []  # the deltas whose tokens are counted in their bytes
        tokens, answered = 0, False
        assembled = 0  # whole: the deltas given to the answer so far (each run of them before the next other event)
        chunks: list[Chunk | None] = []
        for payload in payloads:
            if payload.startswith(_DELTA):
                deltas.append(payload)
                if answer is None:
                    out += (_DELTA_EVENT, payload, b"\n\n")
                continue
            if answer is not None and len(deltas) > assembled:
                tokens, answered = self._assemble(deltas[assembled:], tokens, answered, uncounted)
                assembled = len(deltas)
            translated = self._other(payload)
            if translated is None:
                chunks.append(None)
            else:
                chunks += translated
        if answer is not None and len(deltas) > assembled:
            tokens, answered = self._assemble(deltas[assembled:], tokens, answered, uncounted)
        if not uncounted:
            return tokens, answered, chunks
        # A JSON string escapes its quotes: `"type":"text_delta"` can only be a delta's own type.
        joined = b"".join(uncounted)
        text = joined.count(b'"type":"text_delta"')
        if text == len(uncounted):  # most reads: text alone (each count is a pass over the deltas)
            return tokens + text, True, chunks
        answer_tokens = text + joined.count(b'"type":"input_json_delta"')
        return (tokens + answer_tokens + joined.count(b'"type":"thinking_delta"'), answered or answer_tokens > 0,
                chunks)

    def _assemble(self, run: list[bytes], tokens: int, answered: bool, uncounted: list[bytes]) -> tuple[int, bool]:
        """Whole: a run of deltas to the answer. One it decoded in one call is all tokens of its kind
        (added to `tokens`, `answered`); any other is counted in its bytes (left in `uncounted`)."""
        assert self._answer is not None
        field = self._answer.deltas(run)
        if field is None:
            uncounted += run
            return tokens, answered
        return tokens + len(run), answered or field != "thinking"

    def _other(self, payload: bytes) -> list[Chunk] | None:
        """An event other than a delta: kept for the client, and translated for the meter."""
        if payload.startswith(_OTHER_PREFIXES):
            if not self.whole:  # (the message assembled from a whole stream needs neither)
                self._out += (_OTHERS[payload[:payload.find(b'"', 9) + 1]], payload, b"\n\n")
            return NO_TOKEN
        if payload.startswith(_STOP):
            if not self.whole:
                self._out += (b"event: message_stop\ndata: ", payload, b"\n\n")
            return [END]
        event = loads(payload)
        if event is None:
            return None
        kind = event.get("type")
        if self._answer is not None:
            if kind == "message_start" and isinstance(event.get("message"), dict):
                event["message"]["model"] = self.model
            self._answer.event(event)
        elif kind != "error":  # an error event is rendered by the gateway, as any failure is
            if kind == "message_start" and isinstance(event.get("message"), dict):
                message = event["message"]
                renamed = self.renamed(payload, message.get("model"))
                message["model"] = self.model
                payload = renamed if renamed is not None else orjson.dumps(event)
            self._out += (b"event: ", str(kind).encode(), b"\ndata: ", payload, b"\n\n")
        return self.translate(event)

    def result(self) -> dict[str, Any]:
        return (self._answer or MessageAnswer()).result()
