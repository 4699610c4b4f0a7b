"""`POST /v1/messages` (Anthropic's Messages API), translated to a chat completion upstream.

    system              a string or text blocks -> a leading system message
    messages            user/assistant turns; content a string or blocks: text, image (base64 or
                        url source) -> image_url parts; tool_use (assistant) -> `tool_calls`;
                        tool_result (user) -> a `tool` message each, before the turn's other content
    tools               {name, description, input_schema} -> function tools
    tool_choice         auto -> auto, any -> required, tool -> that function, none -> none;
                        disable_parallel_tool_use -> parallel_tool_calls: false
    max_tokens (required), stop_sequences -> stop, temperature, top_p, stream
    provider, speed, models, session_id   the gateway's routing fields, as in chat
    fallbacks           Anthropic's server-side fallbacks: their models become `models` (never forwarded)

The client key may come as `x-api-key` (the Anthropic SDK's header) or as a bearer token
(access/gate.py); `anthropic-version` and `anthropic-beta` are accepted and not needed. Errors are
rendered in Anthropic's shape (`errors.error_body(..., "anthropic")`); answers by messages_render.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import orjson

from gateway.apis.adapter import ClientApi, StreamRenderer
from gateway.apis.messages_render import MessagesStream, render_message
from gateway.apis.schemas import MESSAGES_REQUEST
from gateway.config import GatewayFile
from gateway.context import ChatRequest
from gateway.errors import InvalidRequest
from gateway.parse import chat_request_from, check_headers, parse_json_body

ROUTING_FIELDS = ("provider", "speed", "models", "session_id", "route", "transforms", "usage")


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _text(block: Any, where: str) -> str:
    if not isinstance(block, dict) or block.get("type") != "text" or not isinstance(block.get("text"), str):
        raise _bad(f"'{where}' must be a text block.", where)
    return str(block["text"])


def _image(block: dict[str, Any], where: str) -> dict[str, Any]:
    source = block.get("source")
    if (isinstance(source, dict) and source.get("type") == "base64" and isinstance(source.get("data"), str)
            and isinstance(source.get("media_type", ""), str)):
        url = f"data:{source.get('media_type', 'image/png')};base64,{source['data']}"
    elif isinstance(source, dict) and source.get("type") == "url" and isinstance(source.get("url"), str):
        url = source["url"]
    else:
        raise _bad(f"'{where}.source' must be a base64 or url image source.", f"{where}.source")
    return {"type": "image_url", "image_url": {"url": url}}


def _tool_result_text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        # Images in a tool result are checked but not forwarded: a chat tool message is text.
        return "".join(_text(b, f"{where}[{i}]") for i, b in enumerate(content)
                       if not (isinstance(b, dict) and b.get("type") == "image" and _image(b, f"{where}[{i}]")))
    raise _bad(f"'{where}' must be a string or an array of text blocks.", where)


def _turn(message: Any, where: str) -> list[dict[str, Any]]:
    """One Anthropic turn as chat messages (tool results first, then the rest of the turn)."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        raise _bad(f"'{where}.role' must be user or assistant.", f"{where}.role")
    role, content = message["role"], message.get("content")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    if not isinstance(content, list):
        raise _bad(f"'{where}.content' must be a string or an array of content blocks.", f"{where}.content")
    tool_results: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for i, block in enumerate(content):
        at = f"{where}.content[{i}]"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            parts.append({"type": "text", "text": _text(block, at)})
        elif kind == "image":
            parts.append(_image(block, at))
        elif kind == "tool_use" and role == "assistant":
            if (not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str)
                    or not isinstance(block.get("input", {}), dict)):
                raise _bad(f"'{at}' needs a string id and name, and an object input.", at)
            calls.append({"id": block["id"], "type": "function", "function": {
                "name": block["name"], "arguments": orjson.dumps(block.get("input") or {}).decode()}})
        elif kind == "tool_result" and role == "user":
            if not isinstance(block.get("tool_use_id"), str) or not isinstance(block.get("is_error", False), bool):
                raise _bad(f"'{at}' needs a string tool_use_id (and a boolean is_error).", f"{at}.tool_use_id")
            text = _tool_result_text(block.get("content"), f"{at}.content")
            if block.get("is_error"):
                text = f"Error: {text}"
            tool_results.append({"role": "tool", "tool_call_id": block["tool_use_id"], "content": text})
        elif kind in ("thinking", "redacted_thinking") and role == "assistant":
            continue  # earlier reasoning: chat completions take none
        else:
            raise _bad(f"'{at}.type' {str(kind)[:40]!r} is not supported (text, image, tool_use, tool_result).",
                       f"{at}.type")
    out = list(tool_results)
    if parts or calls:
        text_only = all(p["type"] == "text" for p in parts)
        body: Any = "".join(p["text"] for p in parts) if text_only else parts
        turn: dict[str, Any] = {"role": role, "content": body if body or not calls else None}
        if calls:
            turn["tool_calls"] = calls
        out.append(turn)
    return out


def _tool_choice(value: Any) -> tuple[Any, bool | None]:
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise _bad("'tool_choice' must be an object.", "tool_choice")
    if not isinstance(value.get("disable_parallel_tool_use", False), bool):
        param = "tool_choice.disable_parallel_tool_use"
        raise _bad(f"'{param}' must be a boolean.", param)
    parallel = False if value.get("disable_parallel_tool_use") else None
    kind = value.get("type")
    if kind in ("auto", "none"):
        return kind, parallel
    if kind == "any":
        return "required", parallel
    if kind == "tool" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}, parallel
    raise _bad("'tool_choice.type' must be auto, any, tool (with a name) or none.", "tool_choice.type")


def translate(body: dict[str, Any]) -> dict[str, Any]:
    """A Messages body -> the chat completions body. Fields not translated here (metadata, top_k,
    thinking, ...) are accepted and not forwarded."""
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is float and max_tokens.is_integer():
        max_tokens = int(max_tokens)  # 16.0 is an integer to JSON Schema
    if type(max_tokens) is not int or max_tokens < 1:
        raise _bad("max_tokens: Field required (an integer >= 1).", "max_tokens")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise _bad("messages: Field required (a non-empty array).", "messages")
    system = body.get("system")
    if isinstance(system, list):
        system = "".join(_text(b, f"system[{i}]") for i, b in enumerate(system))
    elif system is not None and not isinstance(system, str):
        raise _bad("system: must be a string or an array of text blocks.", "system")
    messages = [{"role": "system", "content": system}] if system else []
    for i, message in enumerate(raw_messages):
        messages += _turn(message, f"messages[{i}]")
    if len(messages) == (1 if system else 0):  # turns with nothing to forward (only thinking): an empty one
        messages.append({"role": "user", "content": ""})
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise _bad(f"{name}: must be a number.", name)
    chat: dict[str, Any] = {k: body[k] for k in ("model", "stream", "temperature", "top_p", *ROUTING_FIELDS)
                            if k in body}
    chat["messages"] = messages
    chat["max_tokens"] = max_tokens
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _bad("stop_sequences: must be an array of strings.", "stop_sequences")
        chat["stop"] = stop
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools: must be an array.", "tools")
        chat_tools = []
        for i, tool in enumerate(tools):
            if (not isinstance(tool, dict) or not isinstance(tool.get("name"), str)
                    or not isinstance(tool.get("input_schema", {}), dict)
                    or not isinstance(tool.get("description", ""), str)):
                raise _bad(f"tools.{i}: a client tool needs a name (and an object input_schema).", f"tools[{i}]")
            function = {"name": tool["name"], "parameters": tool.get("input_schema") or {"type": "object"}}
            if tool.get("description"):
                function["description"] = tool["description"]
            chat_tools.append({"type": "function", "function": function})
        if chat_tools:
            chat["tools"] = chat_tools
    choice, parallel = _tool_choice(body.get("tool_choice"))
    if choice is not None:
        chat["tool_choice"] = choice
    if parallel is not None and tools:
        chat["parallel_tool_calls"] = parallel
    return chat


class MessagesApi(ClientApi):
    name = "messages"
    error_shape = "anthropic"
    path = "/v1/messages"
    summary = "Messages (Anthropic), translated to chat completions"
    request_schema = MESSAGES_REQUEST
    request_example: dict[str, Any] = {"max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]}
    ok_response: dict[str, Any] = {"content": {"application/json": {}, "text/event-stream": {}},
                                   "description": "The `message` object; with `stream: true`, its events"}

    def parse(self, raw: bytes, headers: Mapping[str, str], request_id: str, limits: GatewayFile) -> ChatRequest:
        check_headers(headers)
        body = parse_json_body(raw, limits)
        chat_body = translate(body)
        fallbacks = body.get("fallbacks")  # Anthropic's server-side fallback: the gateway's own `models`
        if isinstance(fallbacks, list) and "models" not in chat_body:
            chat_body["models"] = [f["model"] for f in fallbacks
                                   if isinstance(f, dict) and isinstance(f.get("model"), str)]
        chat = chat_request_from(chat_body, headers, request_id, limits, api=self.name)
        # Kept for an anthropic endpoint, which is passed the body as sent (gateway/upstreams/anthropic.py).
        return replace(chat, client_body=body, client_betas=headers.get("anthropic-beta"))

    def render_json(self, result: dict[str, Any], chat: ChatRequest) -> dict[str, Any]:
        return render_message(result, chat.model)

    def stream_renderer(self, chat: ChatRequest, model: str) -> StreamRenderer | None:
        return MessagesStream(chat.model)
