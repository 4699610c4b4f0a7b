"""Validation of a chat-completions request and what it will produce.

Does: check the JSON body (messages, model, max_tokens, trailing assistant prefix) against an
endpoint profile and turn it into a `ChatJob`: the exact reasoning and answer tokens to emit, the
finish reason and the prompt accounting. Defines `ApiError`, an OpenAI-shaped error answer.
Does not: check capacity or context length against live state, wait, or write to sockets.

Length rules: with `max_tokens`/`max_completion_tokens` set, the answer has exactly that many
completion tokens, reasoning first (`min(reasoning_tokens, limit)` of them), finish "length";
without (or, with the profile's `natural_stop`, under a limit that leaves room for them),
`reasoning_tokens` + `output_tokens`, finish "stop". A trailing assistant message (only on
`accepts_prefix` endpoints) holds k already-delivered answer words: the request then emits answer
tokens k.. of the same uncut answer (same messages) and no reasoning (if k > 0). Its limit counts the
new tokens only, as real hosts count it: a continuation asked for `max_tokens` L emits answer tokens
k..k+L, finish "length" (so asking for what is left of the first limit ends where the uncut answer
would have).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.simulator.config import EndpointProfile
from gateway.simulator.content import (
    PrefixCache,
    content_text,
    count_prefix_tokens,
    messages_digest,
    token_ids,
)
from gateway.simulator.payloads import error_body
from gateway.simulator.script import scripted_answer
from gateway.simulator.structured import Structured, prompt_messages, structured_answer

MAX_COMPLETION_TOKENS = 131_072  # a larger max_tokens is refused, as real hosts do


class ApiError(Exception):
    """An OpenAI-shaped error answer; `outcome` is how the attempt is recorded."""

    def __init__(
        self,
        status: int,
        message: str,
        type_: str,
        code: str | None,
        param: str | None = None,
        outcome: str = "bad_request",
        headers: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(message, type_, code, param)
        self.outcome = outcome
        self.headers = headers or []


def _bad(message: str, param: str | None, code: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", code, param)


def rate_limited(profile: EndpointProfile, message: str) -> ApiError:
    retry = profile.retry_after_s
    return ApiError(
        429,
        message,
        "rate_limit_exceeded",
        "rate_limit_exceeded",
        outcome="rate_limited",
        headers=[("retry-after", f"{retry:g}"), ("retry-after-ms", str(round(retry * 1000)))],
    )


@dataclass(slots=True)
class ChatJob:
    """What one accepted chat request will produce (decided before any waiting)."""

    model: str
    stream: bool
    include_usage: bool
    reasoning_ids: bytes  # word indexes of the reasoning tokens this request emits
    answer_ids: bytes  # word indexes of the answer tokens this request emits (after any prefix)
    finish_reason: str  # "stop" or "length"
    prefix_tokens: int
    prompt_tokens: int
    prefixes: list[tuple[bytes, int]] = field(default_factory=list)
    cached_tokens: int = 0
    structured: Structured | None = None  # a tool call or a JSON answer instead of words
    kind: str = "chat"  # or "completions", "messages", "responses": the API's chunk and body shapes
    asked_tier: Any = None  # the request's `speed` (Messages) or `service_tier`
    served_tier: str | None = None  # the tier reported in the answer (None: none, for chat unasked)
    cache_write: bool = False  # a Messages request with cache_control: its uncached prompt is written
    cache_write_1h: bool = False  # ... with a one-hour lifetime (`ttl: "1h"`)
    encrypted_reasoning: bool = False  # a Responses request that includes reasoning.encrypted_content

    @property
    def n_tokens(self) -> int:
        extra = len(self.structured.pieces) if self.structured is not None else 0
        return len(self.reasoning_ids) + len(self.answer_ids) + extra

    def usage(self) -> dict[str, Any]:
        completion = self.n_tokens
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": completion,
            "total_tokens": self.prompt_tokens + completion,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": len(self.reasoning_ids)},
        }


def parse_chat_request(raw: bytes, profile: EndpointProfile, kind: str = "chat") -> ChatJob:
    """Validate a chat request body (`kind="completions"`: a legacy completion's, whose `prompt` counts
    as one user message) against `profile` and decide exactly what it will produce.

    Raises `ApiError` (400 or 404) with OpenAI's error shape. The context-length and capacity
    checks are the caller's, since they depend on state.
    """
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _bad("We could not parse the JSON body of your request.", None, "invalid_json") from None
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.", None, "invalid_json")
    messages = body.get("messages") if kind == "chat" else prompt_messages(body.get("prompt"))
    if messages is None and kind != "chat":
        raise _bad("Missing or invalid parameter: 'prompt'.", "prompt", "invalid_value")
    if messages is None:
        raise _bad("Missing required parameter: 'messages'.", "messages", "missing_required_parameter")
    if (
        not isinstance(messages, list)
        or not messages
        or not all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
    ):
        raise _bad(
            "'messages' must be a non-empty array of objects with a 'role'.", "messages", "invalid_value"
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("Missing required parameter: 'model'.", "model", "missing_required_parameter")
    if profile.model is not None and model != profile.model:
        raise ApiError(
            404,
            f"The model `{model}` does not exist or you do not have access to it.",
            "invalid_request_error",
            "model_not_found",
            "model",
            outcome="model_not_found",
        )
    limit_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    limit = body.get(limit_key)
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
        raise _bad(f"'{limit_key}' must be an integer >= 1.", limit_key, "invalid_value")
    if limit is not None and limit > MAX_COMPLETION_TOKENS:  # as real hosts do, before allocating anything
        raise _bad(f"'{limit_key}' is too large: {limit}. This model supports at most {MAX_COMPLETION_TOKENS} "
                   "completion tokens.", limit_key, "invalid_value")
    prefix_text: str | None = None
    base = messages
    if messages[-1]["role"] == "assistant":
        if not profile.accepts_prefix:
            raise _bad(
                "This endpoint does not accept a trailing assistant message (prefix).",
                "messages",
                "prefix_not_supported",
            )
        prefix_text = content_text(messages[-1].get("content"))
        base = messages[:-1]
    # Exactly `limit` completion tokens when the request sets one (reasoning first, like
    # OpenAI's max_completion_tokens), else the profile's natural lengths.
    if limit is None or (profile.natural_stop and limit >= profile.reasoning_tokens + profile.output_tokens):
        n_reasoning, n_answer, finish = profile.reasoning_tokens, profile.output_tokens, "stop"
    else:
        n_reasoning = min(profile.reasoning_tokens, limit)
        n_answer, finish = limit - n_reasoning, "length"
    if kind != "chat":  # a legacy completion does not reason
        n_answer, n_reasoning = (profile.output_tokens if limit is None else limit), 0
    k = count_prefix_tokens(prefix_text) if prefix_text else 0
    if k and limit is not None and kind == "chat":
        n_answer = k + limit  # the limit is of new tokens: all of them answer (the reasoning came before)
    digest = messages_digest(base)
    structured = None
    if kind == "chat" and not k:
        script = profile.script
        structured = structured_answer(body, messages, digest) if script is None else \
            scripted_answer(script, body, messages, digest)
    if structured is not None:  # the whole tool call or JSON document, whatever the limit
        n_reasoning, n_answer = 0, 0
        finish = "tool_calls" if structured.kind == "tool_call" else "stop"
    options = body.get("stream_options")
    prefixes = PrefixCache.prefixes(messages)
    tier = body.get("service_tier")
    return ChatJob(
        model=model,
        stream=bool(body.get("stream")),
        include_usage=isinstance(options, dict) and bool(options.get("include_usage")),
        # A continuation resumes the answer: the reasoning was delivered before the cut.
        reasoning_ids=b"" if k else token_ids(digest, b"reasoning", n_reasoning),
        answer_ids=token_ids(digest, b"answer", n_answer)[k:],
        finish_reason=finish,
        prefix_tokens=k,
        prompt_tokens=prefixes[-1][1],
        prefixes=prefixes,
        structured=structured,
        kind=kind,
        asked_tier=tier,
        served_tier=(profile.faults.downgrade_to or tier) if isinstance(tier, str) else None,
    )
