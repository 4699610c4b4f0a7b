"""OpenAI Responses upstream (`api: openai-responses`): the request from a chat body, the stream to chat chunks.

Request (`POST {base_url}/responses`, `store: false`): messages -> `input` items (system and
developer stay messages; user parts -> input_text / input_image; assistant `tool_calls` ->
`function_call` items; `tool` messages -> `function_call_output`); function tools flattened
(`{type: function, name, description, parameters}`); tool_choice; max_tokens -> max_output_tokens;
temperature, top_p, parallel_tool_calls; the endpoint's `service_tier`.

Stream: response.created (id, model) -> the role chunk; output_text deltas -> content; reasoning
text and summary deltas -> reasoning_content; function_call items and their argument deltas ->
tool_calls; response.completed / incomplete (usage with cached tokens, `service_tier`, why it
stopped) -> the finish chunk, the usage chunk and the end; response.failed and `error` -> an
error chunk.
"""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import orjson

from gateway.config import Endpoint
from gateway.context import ChatRequest
from gateway.upstreams.passthrough import without
from gateway.upstreams.wire import (
    ANSWER_TOKEN,
    END,
    NO_TOKEN,
    REASONING_TOKEN,
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


def _parts(content: Any, role: str) -> Any:
    if not isinstance(content, list):
        return content if content is not None else ""
    text_kind = "output_text" if role == "assistant" else "input_text"
    out = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "text":
            out.append({"type": text_kind, "text": str(part.get("text", ""))})
        elif isinstance(part, dict) and part.get("type") == "image_url":
            out.append({"type": "input_image", "image_url": str((part.get("image_url") or {}).get("url", ""))})
    return out


def input_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        role = str(message.get("role", "user"))
        if role == "tool":
            content = message.get("content")
            output = content if isinstance(content, str) else orjson.dumps(content).decode()
            items.append({"type": "function_call_output", "call_id": str(message.get("tool_call_id", "")),
                          "output": output})
            continue
        content = message.get("content")
        if content or not message.get("tool_calls"):
            items.append({"role": role, "content": _parts(content, role)})
        for call in message.get("tool_calls") or ():
            function = call.get("function") or {}
            items.append({"type": "function_call", "call_id": call.get("id") or "",
                          "name": function.get("name", ""), "arguments": function.get("arguments") or "{}"})
    return items


def responses_body(chat: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
    body: dict[str, Any] = {"model": endpoint.upstream_model, "input": input_of(chat.get("messages") or []),
                            "stream": True, "store": False}
    limit = chat.get("max_completion_tokens") or chat.get("max_tokens")
    if limit:
        body["max_output_tokens"] = limit
    for name in ("temperature", "top_p", "parallel_tool_calls"):
        if chat.get(name) is not None:
            body[name] = chat[name]
    tools = [t["function"] for t in chat.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
    if tools:
        body["tools"] = [{"type": "function", **f} for f in tools]
        choice = chat.get("tool_choice")
        if isinstance(choice, dict) and isinstance(choice.get("function"), dict):
            choice = {"type": "function", "name": choice["function"].get("name", "")}
        if choice is not None:
            body["tool_choice"] = choice
    if endpoint.service_tier is not None:
        body["service_tier"] = endpoint.service_tier
    if endpoint.extra_body:
        body.update(endpoint.extra_body)
    return body


# The gateway's own fields of a Responses request: routing, and the conversation store, which is
# the gateway's (the upstream is asked `store: false`).
GATEWAY_FIELDS = frozenset({"provider", "speed", "models", "session_id", "route", "transforms", "usage",
                            "service_tier", "store", "previous_response_id"})


def passthrough_body(client: dict[str, Any], endpoint: Endpoint) -> dict[str, Any]:
    """A Responses client's body as sent, for an openai-responses endpoint: unknown fields kept;
    `model` the endpoint's, the gateway's own fields out, extra_body in, streaming, not stored."""
    body = without(client, GATEWAY_FIELDS)
    body["model"] = endpoint.upstream_model
    body["stream"] = True
    body["store"] = False
    if endpoint.service_tier is not None:
        body["service_tier"] = endpoint.service_tier
    if endpoint.extra_body:
        body.update(endpoint.extra_body)
    return body


def passes_through(request: ChatRequest) -> bool:
    """Same API in and out (a Responses client): lossless. A continuation of a stored response is
    not: its history is the gateway's, in chat messages, so it is translated."""
    client = request.client_body
    return request.api == "responses" and client is not None and client.get("previous_response_id") is None


def outgoing(request: ChatRequest, endpoint: Endpoint) -> Outgoing:
    if passes_through(request):
        translator: Any = partial(ResponsesPassThrough, endpoint.model, not request.stream)
        body = passthrough_body(request.client_body, endpoint)  # type: ignore[arg-type]
        return Outgoing(orjson.dumps(body), "/responses", None, translator)
    return Outgoing(orjson.dumps(responses_body(request.body, endpoint)), "/responses", None, ResponsesTranslator)


class ResponsesTranslator(JsonTranslator):
    """OpenAI Responses stream events -> chat-completion chunks (a `Translator`)."""

    def __init__(self) -> None:
        self.head = ChunkHead(created=int(time.time()))
        self.served_tier: str | None = None
        self._calls: dict[Any, int] = {}  # output_index -> tool call index

    def _finish(self, response: dict[str, Any]) -> list[Chunk]:
        if isinstance(response.get("service_tier"), str):
            self.served_tier = response["service_tier"]
        usage = response.get("usage") or {}
        finish = "tool_calls" if self._calls else "stop"
        if response.get("status") == "incomplete":
            reason = (response.get("incomplete_details") or {}).get("reason")
            finish = "content_filter" if reason == "content_filter" else "length"
        total = chat_usage(int(usage.get("input_tokens") or 0), int(usage.get("output_tokens") or 0),
                           int((usage.get("input_tokens_details") or {}).get("cached_tokens") or 0),
                           reasoning=int((usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0))
        return [self.head.chunk(finish=finish), self.head.usage_chunk(total, self.served_tier), END]

    def translate(self, event: dict[str, Any]) -> list[Chunk]:
        kind = event.get("type")
        if kind == "response.output_text.delta":
            return [self.head.chunk({"content": event.get("delta", "")})]
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return [self.head.chunk({"reasoning_content": event.get("delta", "")})]
        if kind == "response.function_call_arguments.delta" and event.get("output_index") in self._calls:
            return [self.head.tool_arguments(self._calls[event["output_index"]], event.get("delta", ""))]
        if kind == "response.output_item.added":
            item = event.get("item") or {}
            if item.get("type") == "function_call":
                index = self._calls[event.get("output_index")] = len(self._calls)
                return [self.head.tool_call(index, item.get("call_id", ""), item.get("name", ""))]
            return []
        if kind == "response.created":
            response = event.get("response") or {}
            self.head.id, self.head.model = str(response.get("id", "")), str(response.get("model", ""))
            return [self.head.chunk({"role": "assistant", "content": ""})]
        if kind in ("response.completed", "response.incomplete"):
            return self._finish(event.get("response") or {})
        if kind == "response.failed":
            error = (event.get("response") or {}).get("error") or {}
            return [error_chunk(str(error.get("message") or "the response failed"), 502, error.get("code"))]
        if kind == "error":
            status = 429 if event.get("code") == "rate_limit_exceeded" else 502
            return [error_chunk(str(event.get("message") or "upstream error"), status, event.get("code"))]
        return []


_DELTA = b'{"type":"response.'
_KIND_AT = len(_DELTA) - len(b"response.")  # where an event's type begins
# Events a pass-through forwards unparsed, and what each counts as for the meter: the deltas (one
# per token), and the events that translate to nothing and hold no `response` (whose model is renamed).
_UNPARSED = {b"response.output_text.delta": ANSWER_TOKEN, b"response.function_call_arguments.delta": ANSWER_TOKEN,
             b"response.reasoning_text.delta": REASONING_TOKEN,
             b"response.reasoning_summary_text.delta": REASONING_TOKEN,
             **dict.fromkeys((b"response.content_part.added", b"response.content_part.done",
                              b"response.output_text.done", b"response.output_item.done",
                              b"response.function_call_arguments.done", b"response.reasoning_text.done",
                              b"response.reasoning_summary_part.added", b"response.reasoning_summary_part.done",
                              b"response.reasoning_summary_text.done"), NO_TOKEN)}
# A client that did not stream gets the final `response` alone: the created and in-progress ones (whose
# model a streaming client gets renamed) are not read either.
_UNPARSED_WHOLE = {**_UNPARSED, b"response.created": NO_TOKEN, b"response.in_progress": NO_TOKEN}
# An added item translates to something only when it is a function call (its first tool-call chunk).
# (A JSON string escapes its quotes: the pattern can only be a type.)
_ITEM_ADDED = b"response.output_item.added"
_FUNCTION_CALL = b'"type":"function_call"'


class ResponsesPassThrough(PassThroughEvents, ResponsesTranslator):
    """Pass-through for a Responses client: every event still translated (so it is measured) and
    kept as it came -- reasoning items with encrypted_content, unknown items -- for the client: as
    SSE events to `take()` while streaming, or the final `response` (`result()`) when `whole`. Only
    `response.model` becomes the public name, in the event's bytes."""

    def __init__(self, model: str, whole: bool) -> None:
        ResponsesTranslator.__init__(self)
        PassThroughEvents.__init__(self, model, whole)
        self._final: dict[str, Any] = {}
        self._unparsed = _UNPARSED_WHOLE if whole else _UNPARSED
        self._upstream: Any = None  # the upstream's model name, once `response.created` has said it

    def read(self, payloads: list[bytes]) -> Read:
        """The events of one network read, with the ones that are not parsed (most of them) handled inline."""
        unparsed, whole, out = self._unparsed, self.whole, self._out
        tokens = 0
        answered = False
        chunks: list[Chunk | None] = []
        for payload in payloads:
            if payload.startswith(_DELTA):
                kind = payload[_KIND_AT:payload.find(b'"', len(_DELTA))]
                token = unparsed.get(kind)
                if token is not None:
                    if not whole:
                        out += (b"event: ", kind, b"\ndata: ", payload, b"\n\n")
                    if token:
                        tokens += 1
                        answered = answered or token is ANSWER_TOKEN
                    continue
                if kind == _ITEM_ADDED and payload.find(_FUNCTION_CALL) < 0:  # a message or reasoning item
                    if not whole:
                        out += (b"event: ", kind, b"\ndata: ", payload, b"\n\n")
                    continue
                if kind == b"response.in_progress" and self._renamed_unparsed(payload):
                    continue
            translated = self._parsed(payload)
            if translated is None:
                chunks.append(None)
            else:
                chunks += translated
        return tokens, answered, chunks

    def _renamed_unparsed(self, payload: bytes) -> bool:
        """A streaming client's `response.in_progress` (it translates to nothing) passed on with the model
        renamed in its bytes, unparsed, once `response.created` has said the upstream's model name."""
        renamed = self.renamed(payload, self._upstream)
        if renamed is None:
            return False
        self._out += (b"event: response.in_progress\ndata: ", renamed, b"\n\n")
        return True

    def _parsed(self, payload: bytes) -> list[Chunk] | None:
        """An event that is parsed: kept for the client with its `response.model` renamed, and translated."""
        event = loads(payload)
        if event is None:
            return None
        kind = event.get("type")
        response = event.get("response")
        if isinstance(response, dict) and "model" in response:
            upstream = response["model"]
            response["model"] = self.model
            if kind in ("response.completed", "response.incomplete"):
                self._final = response
            elif kind == "response.created":
                self._upstream = upstream
            if not self.whole:
                renamed = self.renamed(payload, upstream)
                payload = renamed if renamed is not None else orjson.dumps(event)
        if not self.whole and kind not in ("error", "response.failed"):  # failures: the gateway renders them
            self._out += (b"event: ", str(kind).encode(), b"\ndata: ", payload, b"\n\n")
        return self.translate(event)

    def result(self) -> dict[str, Any]:
        return self._final
