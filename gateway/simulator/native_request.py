"""Anthropic Messages and OpenAI Responses requests, read as the chat request they amount to.

Does: turn a `/v1/messages` or `/v1/responses` body into the chat-completions body it means
(messages, max_tokens, tools, tool_choice), so the one `parse_chat_request` decides what the answer
is (a limit is a cap here: an answer shorter than it ends naturally); note the tier asked for
(`speed`, `service_tier`) and the tier reported (the profile's `faults.downgrade_to`, a silent
downgrade, wins); flag prompt-cache writes (`cache_control`).
Does not: build the answer's bytes (native_payloads.py) or wait.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.simulator.chat_request import ApiError, ChatJob, parse_chat_request
from gateway.simulator.config import EndpointProfile

# What each API reports when no tier was asked for.
DEFAULT_TIER = {"messages": "standard", "responses": "default", "chat": "default"}


def _bad(message: str) -> ApiError:
    return ApiError(400, message, "invalid_request_error", "invalid_request_error", outcome="bad_request")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and "text" in b)
    return ""


def _from_messages(body: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(body.get("max_tokens"), int):
        raise _bad("max_tokens: Field required")
    chat: list[dict[str, Any]] = []
    if body.get("system"):
        chat.append({"role": "system", "content": _text(body["system"])})
    for turn in body.get("messages") or ():
        if not isinstance(turn, dict):
            raise _bad("messages: each message must be an object")
        role, content = turn.get("role"), turn.get("content")
        if isinstance(content, str):
            chat.append({"role": role, "content": content})
            continue
        text, calls = [], []
        for block in content if isinstance(content, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "tool_result":
                chat.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                             "content": _text(block.get("content"))})
            elif kind == "tool_use":
                calls.append({"id": block.get("id"), "type": "function", "function": {
                    "name": block.get("name"), "arguments": orjson.dumps(block.get("input") or {}).decode()}})
            elif kind == "text":
                text.append(str(block.get("text", "")))
        if text or calls or not chat or chat[-1].get("role") != "tool":
            chat.append({"role": role, "content": "".join(text), **({"tool_calls": calls} if calls else {})})
    out: dict[str, Any] = {"model": body.get("model"), "messages": chat, "max_tokens": body["max_tokens"]}
    tools = [{"type": "function", "function": {"name": t.get("name"), "parameters": t.get("input_schema")}}
             for t in body.get("tools") or () if isinstance(t, dict) and "name" in t]
    if tools:
        out["tools"] = tools
    choice = body.get("tool_choice") or {}
    if choice.get("type") == "none":
        out["tool_choice"] = "none"
    elif choice.get("type") == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    return out


def _from_responses(body: dict[str, Any]) -> dict[str, Any]:
    chat: list[dict[str, Any]] = []
    if body.get("instructions"):
        chat.append({"role": "system", "content": str(body["instructions"])})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise _bad("input: a string or an array of items")
    for item in items:
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message":
            chat.append({"role": item.get("role"), "content": _text(item.get("content"))})
        elif kind == "function_call":
            chat.append({"role": "assistant", "content": "", "tool_calls": [{
                "id": item.get("call_id"), "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "{}")}}]})
        elif kind == "function_call_output":
            chat.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": str(item.get("output", ""))})
    out: dict[str, Any] = {"model": body.get("model"), "messages": chat}
    if body.get("max_output_tokens") is not None:
        out["max_tokens"] = body["max_output_tokens"]
    tools = [{"type": "function", "function": {"name": t.get("name"), "parameters": t.get("parameters")}}
             for t in body.get("tools") or () if isinstance(t, dict) and t.get("type") == "function"]
    if tools:
        out["tools"] = tools
    choice = body.get("tool_choice")
    if choice == "none":
        out["tool_choice"] = "none"
    elif isinstance(choice, dict) and choice.get("type") == "function":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    return out


def served_tier(profile: EndpointProfile, asked: Any, kind: str) -> str:
    if profile.faults.downgrade_to is not None:
        return profile.faults.downgrade_to
    if isinstance(asked, str) and asked != "auto":
        return asked
    return DEFAULT_TIER[kind]


def parse_native_request(raw: bytes, profile: EndpointProfile, kind: str) -> ChatJob:
    """A Messages (`kind="messages"`) or Responses request -> its `ChatJob` (kind kept, tiers set)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _bad("The request body is not valid JSON.") from None
    if not isinstance(body, dict):
        raise _bad("The request body must be a JSON object.")
    chat = _from_messages(body) if kind == "messages" else _from_responses(body)
    # Both APIs' limits are caps: a model that is done sooner stops there (Messages always sets one).
    if chat.get("max_tokens", 0) >= profile.reasoning_tokens + profile.output_tokens:
        del chat["max_tokens"]
    job = parse_chat_request(orjson.dumps(chat), profile)
    job.kind = kind
    job.stream = bool(body.get("stream"))
    job.include_usage = True  # both APIs always report usage
    job.asked_tier = body.get("speed" if kind == "messages" else "service_tier")
    job.served_tier = served_tier(profile, job.asked_tier, kind)
    job.cache_write = b"cache_control" in raw
    job.cache_write_1h = job.cache_write and b'"1h"' in raw
    job.encrypted_reasoning = kind == "responses" and "reasoning.encrypted_content" in (body.get("include") or ())
    return job
