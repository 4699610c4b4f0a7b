"""`POST /v1/messages` (Anthropic's Messages API), translated to a chat completion upstream.

    system              a string or text blocks -> a leading system message
    messages            user/assistant turns, and system turns (Claude Code sends one) -> chat
                        messages in order; content blocks by messages_content.py
    tools               client tools -> function tools; server tools (web_search_20250305, ...) dropped
    tool_choice         auto -> auto, any -> required, tool -> that function, none -> none;
                        disable_parallel_tool_use -> parallel_tool_calls: false; forcing a dropped
                        server tool is a 400 naming both, unless an anthropic endpoint serves it
    thinking, output_config.effort   -> `reasoning_effort`, for endpoints with the `reasoning`
                        capability only (else dropped, named): enabled by its budget_tokens (< 4096
                        low, < 16384 medium, else high), adaptive -> the model's own default, an
                        effort low/medium/high as it is, xhigh/max -> high; disabled -> none sent
    output_config.format  json_schema -> response_format json_schema
    max_tokens (required), stop_sequences -> stop, temperature, top_p, stream
    metadata.user_id    the session affinity key, unless `session_id` or `x-session-id` gives one
    provider, speed, models, session_id   the gateway's routing fields, as in chat
    fallbacks           Anthropic's server-side fallbacks: their models become `models` (never
                        forwarded); an entry's own max_tokens, thinking, output_config and speed
                        apply to its model only (messages_fallbacks.py)

Any other field (context_management, container, mcp_servers, service_tier, top_k, cache_control,
and next month's) is accepted, not forwarded, and named in `x-ultraroute-dropped` (README, "Client
API fields"). All of that is the translation's: an `anthropic` endpoint is passed the body as sent
(gateway/upstreams/anthropic.py), nothing dropped. The client key may come as `x-api-key` (the
Anthropic SDK's header) or as a bearer token (access/gate.py); `anthropic-version`,
`anthropic-beta` and `?beta=true` are accepted and not needed (the betas go on to an anthropic
endpoint). Errors are rendered in Anthropic's shape (`errors.error_body(..., "anthropic")`); answers
by messages_render.py. `count_tokens()` is `POST /v1/messages/count_tokens`'s estimate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis import messages_content, messages_fallbacks
from gateway.apis.adapter import ClientApi, StreamRenderer
from gateway.apis.messages_content import Translation, bad, field_name, system_text
from gateway.apis.messages_render import MessagesStream, render_message
from gateway.apis.schemas import MESSAGES_REQUEST
from gateway.config import GatewayFile
from gateway.context import ChatRequest, Fallback
from gateway.errors import InvalidRequest, Untranslatable
from gateway.parse import chat_request_from, check_headers, parse_json_body
from gateway.upstreams.attempt import prompt_estimate

ROUTING_FIELDS = ("provider", "speed", "models", "session_id", "route", "transforms", "usage")
# Fields translated here; any other is dropped and named.
TRANSLATED = frozenset({"model", "max_tokens", "messages", "system", "tools", "tool_choice", "stop_sequences",
                        "temperature", "top_p", "stream", "thinking", "output_config", "metadata", "fallbacks",
                        *ROUTING_FIELDS})
# What the chat body takes from the client's as it is.
_CHAT_FIELDS = frozenset({"model", "stream", "temperature", "top_p", *ROUTING_FIELDS})
_REASONING_FIELDS = frozenset({"thinking", "output_config"})
EFFORTS = {"low": "low", "medium": "medium", "high": "high", "xhigh": "high", "max": "high"}
# Kept only for endpoints that reason: (body key, capability, the client field it came from).
THINKING = ("reasoning_effort", "reasoning", "thinking")
EFFORT = ("reasoning_effort", "reasoning", "output_config.effort")


def _tool_choice(value: Any) -> tuple[Any, bool | None]:
    if value is None:
        return None, None
    if not isinstance(value, dict):
        raise bad("'tool_choice' must be an object.", "tool_choice")
    if not isinstance(value.get("disable_parallel_tool_use", False), bool):
        param = "tool_choice.disable_parallel_tool_use"
        raise bad(f"'{param}' must be a boolean.", param)
    parallel = False if value.get("disable_parallel_tool_use") else None
    kind = value.get("type")
    if kind in ("auto", "none"):
        return kind, parallel
    if kind == "any":
        return "required", parallel
    if kind == "tool" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}, parallel
    raise bad("'tool_choice.type' must be auto, any, tool (with a name) or none.", "tool_choice.type")


def _budget_effort(budget: Any) -> str | None:
    if type(budget) is not int:
        return None
    return "low" if budget < 4096 else "medium" if budget < 16384 else "high"


def _reasoning(body: dict[str, Any], chat: dict[str, Any], into: Translation) -> list[tuple[str, str, str]]:
    """`thinking` and `output_config` -> `reasoning_effort` (and `response_format`); returns the
    capability fields: what only endpoints that reason get, named for the others."""
    kept: list[tuple[str, str, str]] = []
    thinking = body.get("thinking")
    if thinking is not None and not isinstance(thinking, dict):
        into.drop("thinking")
        thinking = None
    disabled = thinking is not None and thinking.get("type") == "disabled"
    effort: str | None = None
    if thinking is not None and not disabled:
        kept.append(THINKING)  # adaptive (and next month's kinds): the model's own default effort
        if thinking.get("type") == "enabled":
            effort = _budget_effort(thinking.get("budget_tokens"))
    config = body.get("output_config")
    if isinstance(config, dict):
        asked = config.get("effort")
        if isinstance(asked, str) and asked in EFFORTS and not disabled:
            effort = EFFORTS[asked]
            kept.append(EFFORT)
        elif asked is not None:  # an effort without thinking has no chat equivalent
            into.drop("output_config.effort")
        output_format = config.get("format")
        if (isinstance(output_format, dict) and output_format.get("type") == "json_schema"
                and isinstance(output_format.get("schema"), dict)):
            chat["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "output", "schema": output_format["schema"]}}
        elif output_format is not None:
            into.drop("output_config.format")
        for key in config:
            if key not in ("effort", "format"):
                into.drop(f"output_config.{field_name(key)}")
    elif config is not None:
        into.drop("output_config")
    if effort is not None:
        chat["reasoning_effort"] = effort
    return kept


def _session(body: dict[str, Any], chat: dict[str, Any], headers: Mapping[str, str]) -> None:
    """`metadata.user_id` as the session affinity key: Claude Code's names its session. A client's
    own `session_id` or `x-session-id` comes first."""
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user_id, str) and user_id and "session_id" not in body and "x-session-id" not in headers:
        chat["session_id"] = user_id[:512]


def translate(body: dict[str, Any], headers: Mapping[str, str] | None = None, *, max_messages: int | None = None,
              counting: bool = False) -> tuple[dict[str, Any], Translation, tuple[tuple[str, str, str], ...]]:
    """A Messages body -> the chat completions body, what was dropped (and the prompt's size), and
    the fields kept only for endpoints with a capability. `counting`: for count_tokens, where
    max_tokens is not asked for."""
    into = Translation()
    max_tokens = body.get("max_tokens")
    if type(max_tokens) is float and max_tokens.is_integer():
        max_tokens = int(max_tokens)  # 16.0 is an integer to JSON Schema
    if not counting and (type(max_tokens) is not int or max_tokens < 1):
        raise bad("max_tokens: Field required (an integer >= 1).", "max_tokens")
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise bad("messages: Field required (a non-empty array).", "messages")
    if max_messages is not None and len(raw_messages) > max_messages:
        raise InvalidRequest(f"'messages' has {len(raw_messages)} entries; the limit is {max_messages}.",
                             param="messages", code="too_many_messages")
    system = body.get("system")
    system = None if system is None else system_text(system, "system", into)
    messages = [{"role": "system", "content": system}] if system else []
    for i, message in enumerate(raw_messages):
        # A user or assistant turn of plain text (most of them): turn()'s first case, without its call.
        content = message.get("content") if type(message) is dict else None
        if type(content) is str and (role := message.get("role")) in ("user", "assistant"):
            into.chars += len(content)
            messages.append({"role": role, "content": content})
        else:
            messages += messages_content.turn(message, f"messages[{i}]", into)
    for m in messages:  # (a loop: a generator for all() costs ~5k instructions under Python 3.11)
        if m["role"] != "system":
            break
    else:  # nothing but system text, or only thinking: a user turn
        messages.append({"role": "user", "content": ""})
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise bad(f"{name}: must be a number.", name)
    # The client's order: most bodies have three or four fields, against the eleven taken. (A loop: a
    # comprehension is a function made and called, ~4k instructions under Python 3.11.)
    chat: dict[str, Any] = {}
    for key, value in body.items():
        if key in _CHAT_FIELDS:
            chat[key] = value
    chat["messages"] = messages
    if not counting:
        chat["max_tokens"] = max_tokens
    stop = body.get("stop_sequences")
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise bad("stop_sequences: must be an array of strings.", "stop_sequences")
        chat["stop"] = stop
    chat_tools, dropped_tools = messages_content.tools(body["tools"], into) if body.get("tools") is not None \
        else ([], {})
    if chat_tools:
        chat["tools"] = chat_tools
    raw_choice = body.get("tool_choice")
    choice, parallel = (None, None) if raw_choice is None else _tool_choice(raw_choice)
    forced = choice["function"]["name"] if isinstance(choice, dict) else None
    # Forcing a server tool: an anthropic endpoint runs it; a translation cannot (kept, not raised).
    if forced is not None and forced in dropped_tools:
        into.refusal = Untranslatable(f"'tool_choice' forces the tool '{forced[:64]}', which chat upstreams cannot "
                                      f"run: it is dropped ({dropped_tools[forced]}).", param="tool_choice")
    elif choice == "required" and dropped_tools and not chat_tools:
        into.refusal = Untranslatable("'tool_choice' forces a tool call, but every tool offered is one chat "
                                      "upstreams cannot run: dropped "
                                      f"({', '.join(sorted(set(dropped_tools.values())))}).", param="tool_choice")
    if choice is not None and (chat_tools or not dropped_tools):
        chat["tool_choice"] = choice
    if parallel is not None and chat_tools:
        chat["parallel_tool_calls"] = parallel
    # (Each only for a body that has its fields: most have none of them.)
    kept = [] if _REASONING_FIELDS.isdisjoint(body) else _reasoning(body, chat, into)
    if headers is not None and "metadata" in body:
        _session(body, chat, headers)
    if not TRANSLATED.issuperset(body):
        for key, value in body.items():
            if key not in TRANSLATED and value is not None:
                into.drop(field_name(key))
    return chat, into, tuple(kept)


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
        chat, translation, kept = translate(body, headers, max_messages=limits.max_messages)
        # Anthropic's server-side fallback: the gateway's own `models` (unless the client names those).
        raw_fallbacks = body.get("fallbacks")
        fallbacks = messages_fallbacks.entries(raw_fallbacks) if raw_fallbacks is not None and "models" not in chat \
            else []
        if fallbacks:
            chat["models"] = [f["model"] for f in fallbacks]
        # The body is kept for an anthropic endpoint, which is passed it as sent (gateway/upstreams/anthropic.py).
        request = chat_request_from(chat, headers, request_id, limits, api=self.name, prompt_chars=translation.chars,
                                    dropped=translation.names(), capability_fields=kept, client_body=body,
                                    client_betas=headers.get("anthropic-beta"), untranslatable=translation.refusal)
        if fallbacks and any(len(f) > 1 for f in fallbacks):  # an entry with fields of its own: its model's request
            own = tuple(self._fallback(request, body, f, headers, limits) for f in fallbacks)
            request = request._replace(fallbacks=own)
        return request

    def _fallback(self, request: ChatRequest, body: dict[str, Any], entry: dict[str, Any],
                  headers: Mapping[str, str], limits: GatewayFile) -> Fallback:
        """A `fallbacks` entry: its speed, and the request its model's endpoints are sent, translated
        from the body with the entry's fields applied (messages_fallbacks.py)."""
        speed = messages_fallbacks.speed_of(entry)
        own = messages_fallbacks.body_for(body, entry)
        if own is None:
            return Fallback(entry["model"], speed)
        chat, translation, kept = translate(own, headers, max_messages=limits.max_messages)
        forward = chat_request_from(chat, headers, request.request_id, limits, api=self.name,
                                    prompt_chars=translation.chars)
        return Fallback(entry["model"], speed, request._replace(
            body=forward.body, dropped=translation.names(), capability_fields=kept, client_body=own,
            untranslatable=translation.refusal))

    def count_tokens(self, raw: bytes, headers: Mapping[str, str], request_id: str, limits: GatewayFile) -> ChatRequest:
        """The request of `POST /v1/messages/count_tokens` (max_tokens not needed); its
        `prompt_estimate` is the answer where no upstream counts."""
        check_headers(headers)
        chat, translation, _ = translate(parse_json_body(raw, limits), headers, max_messages=limits.max_messages,
                                         counting=True)
        chat["stream"] = False
        return chat_request_from(chat, headers, request_id, limits, api=self.name, prompt_chars=translation.chars,
                                 dropped=translation.names())

    def render_json(self, result: dict[str, Any], chat: ChatRequest) -> dict[str, Any]:
        return render_message(result, chat.model)

    def stream_renderer(self, chat: ChatRequest, model: str) -> StreamRenderer | None:
        return MessagesStream(chat.model, prompt_estimate(chat))
