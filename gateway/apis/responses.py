"""`POST /v1/responses` (OpenAI's Responses API), translated to a chat completion upstream.

    input               -> chat `messages` (responses_input.py: messages, function and custom tool
                        calls and their outputs, reasoning items; items with no chat equivalent are
                        dropped and named)
    instructions        -> a leading system message (not carried over by previous_response_id)
    tools, tool_choice  -> chat `tools` / `tool_choice` (responses_tools.py: function tools as they are,
                        namespaces flattened, custom tools as functions of one string; built-in tools
                        dropped and named; forcing a dropped tool is a 400)
    max_output_tokens   -> max_tokens;  temperature, top_p, parallel_tool_calls as they are
    text.format         json_schema -> response_format json_schema; json_object likewise
    reasoning.effort    -> reasoning_effort, for endpoints that reason (capability `reasoning`)
    store, previous_response_id   the session store (gateway/sessions/): `recall` prepends the stored
                        conversation, `after` stores the new turn in the background
    provider, speed, models, session_id, service_tier, prompt_cache_key   the gateway's routing
                        fields, as in chat (prompt_cache_key: the conversation's affinity key)
    user, safety_identifier, prompt_cache_retention   passed on as they are

Stateless unless `store: true`. Fields that change nothing a chat completion answers (`include`,
`client_metadata`, `stream_options`, ...) are accepted. What only OpenAI's own state can honour
(`conversation`, `background: true`, `prompt`) is refused with a 400 naming it. Any other field,
known or new (`text.verbosity`, `reasoning.summary`, ...), is dropped and named in
`x-ultraroute-dropped` (README, "Client API fields"). Drops, and the refusals only a translation
needs (a forced built-in tool, an image by file_id), are the translation's: an `openai-responses`
endpoint is passed the body as sent (gateway/upstreams/openai_responses.py). Answers are rendered
by `responses_render.py`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from gateway.access.keys import ApiKey
from gateway.apis.adapter import ClientApi, StreamRenderer
from gateway.apis.responses_input import REASONING, ChatInput, chat_input
from gateway.apis.responses_render import ResponsesCall, ResponsesStream, render_response
from gateway.apis.responses_tools import NO_TOOLS, chat_tool_choice, chat_tools
from gateway.apis.schemas import RESPONSES_REQUEST
from gateway.config import GatewayFile
from gateway.context import ChatRequest, RequestContext
from gateway.errors import InvalidRequest, Untranslatable
from gateway.parse import chat_request_from, check_headers, parse_json_body
from gateway.sessions import StoredResponse, owner_of

if TYPE_CHECKING:
    from gateway.services import Services

# Fields translated or acted on here; the gateway's routing fields pass to chat_request_from.
ROUTING_FIELDS = ("provider", "speed", "models", "session_id", "route", "transforms", "usage", "service_tier",
                  "prompt_cache_key")
# OpenAI's fields that chat completions take as they are.
PASSED_FIELDS = ("user", "safety_identifier", "prompt_cache_retention")
TRANSLATED_FIELDS = frozenset({"model", "input", "instructions", "tools", "tool_choice", "max_output_tokens",
                               "temperature", "top_p", "parallel_tool_calls", "text", "reasoning", "store",
                               "stream", "previous_response_id", "metadata", *ROUTING_FIELDS, *PASSED_FIELDS})
# Fields that change nothing a chat completion answers: accepted, with no effect (not "dropped").
NO_EFFECT_FIELDS = frozenset({"include", "stream_options", "client_metadata", "max_tool_calls"})
# Fields of OpenAI's API that refer to its own state or run in its own servers: refused when set.
UNSUPPORTED_FIELDS = ("background", "conversation", "prompt")
_UNSUPPORTED = frozenset(UNSUPPORTED_FIELDS)
# Every field `_not_forwarded` lets pass whatever its value: most bodies have no other, settled in C.
_KNOWN_FIELDS = TRANSLATED_FIELDS | NO_EFFECT_FIELDS | _UNSUPPORTED
# What the chat body takes from the client's as it is.
_CHAT_FIELDS = frozenset({"model", "stream", *ROUTING_FIELDS, *PASSED_FIELDS})
# Kept only for endpoints that reason (upstream_body removes them elsewhere): (body key, capability, name).
EFFORT = ("reasoning_effort", "reasoning", "reasoning.effort")
REASONING_CONTENT = ("messages.reasoning_content", "reasoning", REASONING)


def _bad(message: str, param: str) -> InvalidRequest:
    return InvalidRequest(message, param=param)


def _response_format(text: Any, dropped: list[str]) -> dict[str, Any] | None:
    if text is None:
        return None
    if not isinstance(text, dict):
        raise _bad("'text' must be an object.", "text")
    dropped += [f"text.{k[:64]}" for k in text if k != "format" and text[k] is not None]  # verbosity, ...
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
    if isinstance(fmt, dict) and isinstance(fmt.get("type"), str):  # a format not known yet: plain text
        dropped.append(f"text.format.{fmt['type'][:64]}")
        return None
    raise _bad("'text.format' must be an object with a string 'type'.", "text.format")


def _number(body: Mapping[str, Any], name: str) -> float | None:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise _bad(f"'{name}' must be a number.", name)
    return value


def _effort(reasoning: Any, dropped: list[str]) -> str | None:
    if reasoning is None:
        return None
    if not isinstance(reasoning, dict):
        raise _bad("'reasoning' must be an object.", "reasoning")
    effort = reasoning.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise _bad("'reasoning.effort' must be a string.", "reasoning.effort")
    # summary (and the older generate_summary): chat completions give the reasoning itself, no summary.
    dropped += [f"reasoning.{k[:64]}" for k in reasoning if k != "effort" and reasoning[k] is not None]
    return effort


def _not_forwarded(body: Mapping[str, Any], dropped: list[str]) -> None:
    """Refuse what cannot be honoured; name the fields chat completions have no equivalent for."""
    if not _UNSUPPORTED.isdisjoint(body):
        for name in UNSUPPORTED_FIELDS:
            if body.get(name):
                raise _bad(f"Not supported by this gateway: {name}.", name)
    if _KNOWN_FIELDS.issuperset(body):
        return
    for name, value in body.items():
        if name in _KNOWN_FIELDS or value is None:
            continue
        if name == "truncation" and value == "disabled":  # what chat completions do
            continue
        if name == "top_logprobs" and value == 0:
            continue
        dropped.append(name[:64])


def chat_messages(call: ResponsesCall) -> list[dict[str, Any]]:
    system = [{"role": "system", "content": call.instructions}] if call.instructions else []
    # Input of reasoning items only is an empty turn, not an empty conversation.
    return [*system, *call.history, *(call.input_messages or ({"role": "user", "content": ""},))]


class Translation(NamedTuple):
    """A Responses body as a chat completions body, what the answer must echo (`call`), and, for
    `chat_request_from`, what was dropped and what only endpoints that reason get. (A tuple: one per
    request.)"""

    chat: dict[str, Any]
    call: ResponsesCall
    dropped: tuple[str, ...] = ()
    capability_fields: tuple[tuple[str, str, str], ...] = ()
    refusal: InvalidRequest | None = None  # what only the translation cannot honour (errors.Untranslatable)


def translate(body: dict[str, Any]) -> Translation:
    """A Responses body -> the chat completions body (see the module's docstring)."""
    if "input" not in body:
        raise _bad("'input' is required.", "input")
    dropped: list[str] = []
    _not_forwarded(body, dropped)
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
    reasoning, text, raw_tools = body.get("reasoning"), body.get("text"), body.get("tools")
    effort = None if reasoning is None else _effort(reasoning, dropped)
    tools = NO_TOOLS if raw_tools is None else chat_tools(raw_tools)
    refusal: InvalidRequest | None = None
    choice = body.get("tool_choice")
    try:
        tool_choice, offered = (None, tools.chat) if choice is None else chat_tool_choice(choice, tools)
    except Untranslatable as err:  # forcing a built-in tool: an openai-responses endpoint runs it
        refusal, tool_choice, offered = err, None, tools.chat
    response_format = None if text is None else _response_format(text, dropped)
    given = chat_input(body["input"])
    model = body.get("model")
    parallel = body.get("parallel_tool_calls")
    temperature = None if body.get("temperature") is None else _number(body, "temperature")
    top_p = None if body.get("top_p") is None else _number(body, "top_p")
    # (Positional: a NamedTuple's keywords are matched one by one, ~10k instructions for these.)
    call = ResponsesCall(
        model if isinstance(model, str) else "", instructions, tuple(raw_tools) if raw_tools else (),
        choice or "auto", text or {"format": {"type": "text"}}, max_output, temperature, top_p,
        body.get("parallel_tool_calls", True), metadata or {}, bool(body.get("store")), previous,
        tuple(given.messages), (), tools.names)
    # The client's order: most bodies have three or four fields, against the eleven taken. (A loop: a
    # comprehension is a function made and called, ~4k instructions under Python 3.11.)
    chat: dict[str, Any] = {}
    for key, value in body.items():
        if key in _CHAT_FIELDS:
            chat[key] = value
    chat["messages"] = chat_messages(call)
    if max_output is not None:
        chat["max_tokens"] = max_output
    if call.temperature is not None:
        chat["temperature"] = call.temperature
    if call.top_p is not None:
        chat["top_p"] = call.top_p
    if offered:
        chat["tools"] = offered
        if tool_choice is not None:
            chat["tool_choice"] = tool_choice
        if parallel is not None:
            chat["parallel_tool_calls"] = parallel
    if response_format is not None:
        chat["response_format"] = response_format
    if effort is not None:
        chat["reasoning_effort"] = effort
    capability_fields = (*((EFFORT,) if effort is not None else ()),
                         *((REASONING_CONTENT,) if given.reasoning else ()))
    dropped_all = (*tools.dropped, *given.dropped, *dropped) if tools.dropped or given.dropped or dropped else ()
    return Translation(chat, call, dropped_all, capability_fields, refusal or given.refusal)


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
        return self.parse_body(parse_json_body(raw, limits), headers, request_id, limits)

    def parse_body(self, body: dict[str, Any], headers: Mapping[str, str], request_id: str,
                   limits: GatewayFile) -> ChatRequest:
        """`parse` for a body already decoded (and size- and depth-checked): a WebSocket frame's. The
        body is kept for an openai-responses endpoint, passed it as sent (gateway/upstreams/openai_responses.py)."""
        t = translate(body)
        return chat_request_from(t.chat, headers, request_id, limits, api=self.name, origin=t.call,
                                 dropped=t.dropped, capability_fields=t.capability_fields, client_body=body,
                                 untranslatable=t.refusal)

    async def recall(self, chat: ChatRequest, services: Services, client: ApiKey | None) -> ChatRequest:
        call: ResponsesCall = chat.origin
        if call.previous_response_id is None:
            return chat
        stored = await services.sessions.load(call.previous_response_id, client, "previous_response_id")
        call = call._replace(history=stored.messages)
        body = {**chat.body, "messages": chat_messages(call)}
        history_chars = sum(len(m["content"]) for m in stored.messages if isinstance(m.get("content"), str))
        return chat._replace(body=body, origin=call, prompt_chars=chat.prompt_chars + history_chars)

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
    """A response's output items as the chat messages a continuation sends back upstream: one
    assistant turn. Its reasoning stays out of the stored conversation."""
    turn = ChatInput()
    for i, item in enumerate(output):
        if item["type"] != "reasoning":
            turn.item(item, f"output[{i}]")
    return turn.messages
