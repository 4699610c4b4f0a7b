"""`POST /v1/responses` (OpenAI's Responses API), translated to a chat completion upstream.

    input               a string, or a list of messages and items -> chat `messages`:
                        message (role user/system/developer/assistant; input_text, output_text and
                        input_image parts), function_call -> an assistant `tool_calls` entry,
                        function_call_output -> a `tool` message; reasoning items are dropped
    instructions        -> a leading system message (not carried over by previous_response_id)
    tools, tool_choice  function tools only -> chat `tools` / `tool_choice`
    max_output_tokens   -> max_tokens;  temperature, top_p, parallel_tool_calls as they are
    text.format         json_schema -> response_format json_schema; json_object likewise
    reasoning.effort    -> reasoning_effort
    store, previous_response_id   the session store (gateway/sessions/): `recall` prepends the stored
                        conversation, `after` stores the new turn in the background
    provider, speed, models, session_id, service_tier   the gateway's routing fields, as in chat

Stateless unless `store: true`. What the gateway cannot honour through chat completions (built-in
tools, `conversation`, `background`, `prompt`) is refused with a 400 naming it; other fields
(`user`, `include`, `truncation`, ...) are accepted and not forwarded.
Answers are rendered by `responses_render.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gateway.access.keys import ApiKey
from gateway.apis.adapter import ClientApi, StreamRenderer
from gateway.apis.responses_render import ResponsesCall, ResponsesStream, render_response
from gateway.apis.schemas import RESPONSES_REQUEST
from gateway.config import GatewayFile
from gateway.context import ChatRequest, RequestContext
from gateway.errors import InvalidRequest
from gateway.parse import chat_request_from, check_headers, parse_json_body
from gateway.sessions import StoredResponse, owner_of

if TYPE_CHECKING:
    from gateway.services import Services

# Fields translated or acted on here; the gateway's routing fields pass to chat_request_from.
ROUTING_FIELDS = ("provider", "speed", "models", "session_id", "route", "transforms", "usage", "service_tier",
                  "prompt_cache_key")
# Fields of OpenAI's API that only its own state or tools can honour: refused, not silently dropped.
UNSUPPORTED_FIELDS = frozenset({"background", "conversation", "prompt"})
ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _part(part: Any, where: str) -> dict[str, Any] | str:
    if not isinstance(part, dict):
        raise _bad(f"'{where}' must be an object.", where)
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        text = part.get("text")
        if not isinstance(text, str):
            raise _bad(f"'{where}.text' must be a string.", f"{where}.text")
        return text
    if kind == "refusal":
        if not isinstance(part.get("refusal"), str):
            raise _bad(f"'{where}.refusal' must be a string.", f"{where}.refusal")
        return str(part["refusal"])
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise _bad(f"'{where}.image_url' must be a URL or data URL (file_id is not supported).",
                       f"{where}.image_url")
        return {"type": "image_url", "image_url": {"url": url, "detail": part.get("detail") or "auto"}}
    raise _bad(f"'{where}.type' {str(kind)[:40]!r} is not supported here (input_text, output_text, input_image).",
               f"{where}.type")


def _content(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"'{where}' must be a string or an array of content parts.", where)
    parts = [_part(p, f"{where}[{i}]") for i, p in enumerate(content)]
    if all(isinstance(p, str) for p in parts):
        return "".join(parts)  # type: ignore[arg-type]
    return [{"type": "text", "text": p} if isinstance(p, str) else p for p in parts]


def _output_text(output: Any, where: str) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        parts = [_part(p, f"{where}[{i}]") for i, p in enumerate(output)]
        return "".join(p for p in parts if isinstance(p, str))
    raise _bad(f"'{where}' must be a string or an array of content parts.", where)


def input_messages(value: Any) -> list[dict[str, Any]]:
    """The `input` as chat messages. Consecutive function calls become one assistant message."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise _bad("'input' must be a string or a non-empty array of items.", "input")
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(value):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"'{where}' must be an object.", where)
        kind = item.get("type", "message")
        if kind == "message":
            role = ROLES.get(item["role"]) if isinstance(item.get("role"), str) else None
            if role is None:
                raise _bad(f"'{where}.role' must be one of user, system, developer, assistant.", f"{where}.role")
            messages.append({"role": role, "content": _content(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call_id, name, arguments = item.get("call_id"), item.get("name"), item.get("arguments")
            if not (isinstance(call_id, str) and isinstance(name, str) and isinstance(arguments, str)):
                raise _bad(f"'{where}' needs string call_id, name and arguments.", where)
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            if messages and messages[-1]["role"] == "assistant":  # text then calls: one turn, as chat has it
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if not isinstance(call_id, str):
                raise _bad(f"'{where}.call_id' must be a string.", f"{where}.call_id")
            messages.append({"role": "tool", "tool_call_id": call_id,
                             "content": _output_text(item.get("output"), f"{where}.output")})
        elif kind == "reasoning":
            continue  # the model's own reasoning from an earlier turn: chat completions take none
        else:
            raise _bad(f"'{where}.type' {str(kind)[:40]!r} is not supported (message, function_call, "
                       "function_call_output).", f"{where}.type")
    return messages


def _tools(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad("'tools' must be an array.", "tools")
    tools = []
    for i, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
            raise _bad(f"'tools[{i}]': only function tools ({{\"type\": \"function\", \"name\": ...}}) are "
                       "supported.", f"tools[{i}]")
        tools.append(tool)
    return tools


def _chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    function = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": function}


def _tool_choice(value: Any) -> Any:
    if value is None or value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    raise _bad("'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}.", "tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _bad("'text' must be an object.", "text")
    fmt = text.get("format")
    if fmt is None or (isinstance(fmt, dict) and fmt.get("type") == "text"):
        return None
    if isinstance(fmt, dict) and fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        if not isinstance(fmt.get("name"), str) or not isinstance(fmt.get("schema"), dict):
            raise _bad("'text.format' of type json_schema needs a string name and an object schema.", "text.format")
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if fmt.get(k) is not None}
        return {"type": "json_schema", "json_schema": schema}
    raise _bad("'text.format.type' must be text, json_object or json_schema.", "text.format")


def _number(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise _bad(f"'{name}' must be a number.", name)
    return value


def chat_messages(call: ResponsesCall) -> list[dict[str, Any]]:
    system = [{"role": "system", "content": call.instructions}] if call.instructions else []
    # Input of reasoning items only is an empty turn, not an empty conversation.
    return [*system, *call.history, *(call.input_messages or ({"role": "user", "content": ""},))]


def translate(body: dict[str, Any]) -> tuple[dict[str, Any], ResponsesCall]:
    """A Responses body -> (the chat completions body, what the answer must echo)."""
    # Other fields (user, include, truncation, ...) change nothing a chat completion could do: ignored.
    unsupported = sorted(k for k in body if k in UNSUPPORTED_FIELDS)
    if unsupported:
        raise _bad(f"Not supported by this gateway: {', '.join(unsupported)}.", unsupported[0])
    if "input" not in body:
        raise _bad("'input' is required.", "input")
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _bad("'instructions' must be a string.", "instructions")
    max_output = body.get("max_output_tokens")
    if type(max_output) is float and max_output.is_integer():
        max_output = int(max_output)  # 16.0 is an integer to JSON Schema
    if max_output is not None and (type(max_output) is not int or max_output < 1):
        raise _bad("'max_output_tokens' must be an integer >= 1.", "max_output_tokens")
    for name in ("store", "stream", "parallel_tool_calls"):
        if body.get(name) is not None and not isinstance(body[name], bool):
            raise _bad(f"'{name}' must be a boolean.", name)
    previous = body.get("previous_response_id")
    if previous is not None and (not isinstance(previous, str) or not previous or len(previous) > 128):
        raise _bad("'previous_response_id' must be a response id.", "previous_response_id")
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _bad("'metadata' must be an object.", "metadata")
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise _bad("'reasoning' must be an object.", "reasoning")
    tools = _tools(body.get("tools"))
    tool_choice = _tool_choice(body.get("tool_choice"))
    response_format = _response_format(body.get("text"))
    call = ResponsesCall(
        model=body.get("model") if isinstance(body.get("model"), str) else "",
        instructions=instructions, tools=tuple(tools), tool_choice=body.get("tool_choice") or "auto",
        text=body.get("text") or {"format": {"type": "text"}}, max_output_tokens=max_output,
        temperature=_number(body, "temperature"), top_p=_number(body, "top_p"),
        parallel_tool_calls=body.get("parallel_tool_calls", True), metadata=metadata or {},
        store=bool(body.get("store")), previous_response_id=previous,
        input_messages=tuple(input_messages(body["input"])))
    chat: dict[str, Any] = {k: body[k] for k in ("model", "stream", *ROUTING_FIELDS) if k in body}
    chat["messages"] = chat_messages(call)
    optional = {"max_tokens": max_output, "temperature": call.temperature, "top_p": call.top_p,
                "tools": [_chat_tool(t) for t in tools] or None, "tool_choice": tool_choice,
                "response_format": response_format,
                "parallel_tool_calls": body.get("parallel_tool_calls") if tools else None,
                "reasoning_effort": (reasoning or {}).get("effort")}
    chat.update({k: v for k, v in optional.items() if v is not None})
    return chat, call


class ResponsesApi(ClientApi):
    name = "responses"
    path = "/v1/responses"
    summary = "Responses (OpenAI), translated to chat completions"
    request_schema = RESPONSES_REQUEST
    request_example: dict[str, Any] = {"input": "Hello", "max_output_tokens": 16}
    ok_response: dict[str, Any] = {"content": {"application/json": {}, "text/event-stream": {}},
                                   "description": "The `response` object; with `stream: true`, its events"}

    def parse(self, raw: bytes, headers: Mapping[str, str], request_id: str, limits: GatewayFile) -> ChatRequest:
        check_headers(headers)
        body = parse_json_body(raw, limits)
        chat_body, call = translate(body)
        chat = chat_request_from(chat_body, headers, request_id, limits, api=self.name, origin=call)
        # Kept for an openai-responses endpoint, passed the body as sent (gateway/upstreams/openai_responses.py).
        return replace(chat, client_body=body)

    async def recall(self, chat: ChatRequest, services: Services, client: ApiKey | None) -> ChatRequest:
        call: ResponsesCall = chat.origin
        if call.previous_response_id is None:
            return chat
        stored = await services.sessions.load(call.previous_response_id, client, "previous_response_id")
        call = replace(call, history=stored.messages)
        body = {**chat.body, "messages": chat_messages(call)}
        history_chars = sum(len(m["content"]) for m in stored.messages if isinstance(m.get("content"), str))
        return replace(chat, body=body, origin=call, prompt_chars=chat.prompt_chars + history_chars)

    def render_json(self, result: dict[str, Any], chat: ChatRequest) -> dict[str, Any]:
        return render_response(result, chat.origin)

    def stream_renderer(self, chat: ChatRequest, model: str) -> StreamRenderer | None:
        return ResponsesStream(chat.origin)

    def after(self, ctx: RequestContext, rendered: dict[str, Any], services: Services) -> None:
        call: ResponsesCall = ctx.request.origin
        if not call.store:
            return
        stored = StoredResponse(rendered["id"], owner_of(ctx.client),
                                (*call.history, *call.input_messages, *output_messages(rendered["output"])),
                                {k: v for k, v in rendered.items() if k not in ("provider", "ultraroute")})
        services.sessions.save_later(stored)


def output_messages(output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A response's output items as the chat messages a continuation sends back upstream."""
    text = "".join(part.get("text", "") for item in output if item["type"] == "message" for part in item["content"])
    calls = [{"id": item["call_id"], "type": "function",
              "function": {"name": item["name"], "arguments": item["arguments"]}}
             for item in output if item["type"] == "function_call"]
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = calls
    return [message]
