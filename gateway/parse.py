"""Stage 1, parse: request bytes and headers -> a `ChatRequest`, or a 400/413 naming the bad param.

The body is read under a size cap (`read_body`), then bounded in nesting depth and message count, so
that a hostile request costs little memory and CPU before it is refused.

Only the fields the gateway acts on are checked; everything else in the body passes through to the
provider untouched, as a drop-in `base_url` must. The gateway's own body fields (`provider`, `speed`,
`models`, `session_id`, OpenRouter's `route`/`transforms`/`usage`) are validated strictly and removed
from what is forwarded. This stage does not decide routing; it only reads what was asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.requests import Request

from gateway.config import GatewayFile
from gateway.configfile import clean_loc
from gateway.context import ChatRequest
from gateway.errors import ClientClosed, InvalidRequest, PayloadTooLarge
from gateway.policy import ProviderOptions, Speed

# Body fields that belong to the gateway, never to the provider.
GATEWAY_FIELDS = frozenset({"provider", "speed", "models", "session_id", "route", "transforms", "usage"})
# OpenRouter's service_tier values that mean "the fast tier"; others ("auto", "flex", ...) pass through.
FAST_SERVICE_TIERS = frozenset({"priority", "fast"})
# The request headers the gateway reads. Any other `x-ultraroute-*` header is refused, not ignored:
# a misspelt option that silently does nothing routes the request in a way the client did not ask for.
HEADER_PREFIX = "x-ultraroute-"
KNOWN_HEADERS = frozenset({"x-ultraroute-policy", "x-ultraroute-speed", "x-ultraroute-priority",
                           "x-ultraroute-metadata"})
USAGE_FIELDS = frozenset({"include"})
_OPENROUTER_FIELDS = frozenset({"route", "transforms", "usage"})  # held to their shapes: _check_openrouter_fields
# OpenAI's message roles. Another role is refused here rather than by (or, worse, silently by) a provider.
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
_ROLES = frozenset(ROLES)
# Model names are looked up, never used as addresses; these only bound the work a request can ask for.
MAX_MODEL_NAME = 256
MAX_FALLBACK_MODELS = 32


def _too_large(size: str, max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"Request body is {size} bytes; the limit is {max_bytes}.")


async def read_body(request: Request, max_bytes: int, headers: Mapping[str, str] | None = None) -> bytes:
    """The request body, never buffering more than `max_bytes`: refused up front when the declared
    `content-length` is over, else as soon as the chunks read pass it (a chunked upload declares no
    length). What the client sends after that is discarded by the server, not held. A client that
    hangs up before the body is whole: `ClientClosed` (a hang-up, not the gateway's failure).
    `headers`: the request's `header_map`, when the caller has it (Starlette's `request.headers`
    is built for the one lookup otherwise)."""
    declared = (request.headers if headers is None else headers).get("content-length")
    # The HTTP parser has already refused a malformed content-length; digits are all that is left.
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise _too_large(declared[:32], max_bytes)
    chunks: list[bytes] = []
    total = 0
    receive = request.receive  # not `request.stream()`: an async generator per request costs more
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientClosed()
        chunk = message.get("body", b"")
        total += len(chunk)
        if total > max_bytes:
            raise _too_large(f"more than {max_bytes}", max_bytes)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def header_map(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """A request's headers (the ASGI scope's list; names lowercase, as servers give them) as a dict,
    the first of a repeated name winning, as with Starlette's `Headers.get`. A request looks up half
    a dozen headers, most of them absent, and each absent lookup in `Headers` scans the list and
    raises a KeyError: ~1.5% of a JSON request's instructions."""
    return {name.decode("latin-1"): value.decode("latin-1") for name, value in reversed(raw)}


def _check_depth(raw: bytes, body: dict[str, Any], max_depth: int) -> None:
    """Refuse a body nested deeper than `max_depth` (the body object itself is level 1).

    A body whose JSON text opens no more than `max_depth` objects and arrays cannot be nested deeper
    (brackets inside strings only raise the count): two counts at C speed settle most requests.
    Otherwise level by level rather than recursively, so a hostile body cannot exhaust the Python
    stack, and only containers are visited further: a typical chat body has four levels and a few
    dozen values."""
    if raw.count(b"{") + raw.count(b"[") <= max_depth:
        return
    level: list[Any] = [body]
    depth = 1
    while True:
        deeper: list[Any] = []
        for container in level:
            for value in container.values() if type(container) is dict else container:
                if type(value) is dict or type(value) is list:  # orjson makes exactly these types
                    deeper.append(value)
        if not deeper:
            return
        depth += 1
        if depth > max_depth:
            raise InvalidRequest(f"Request body is nested deeper than the limit of {max_depth} levels.",
                                 code="json_too_deep")
        level = deeper


def parse_json_body(raw: bytes, limits: GatewayFile) -> dict[str, Any]:
    if len(raw) > limits.max_body_bytes:
        raise _too_large(str(len(raw)), limits.max_body_bytes)
    if not raw:
        raise InvalidRequest("Request body is empty; expected a JSON object.", code="invalid_json")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        # orjson stops at its own depth limit (1024); the gateway's limit is lower and named.
        if "depth" in str(exc) or "recursion" in str(exc):
            raise InvalidRequest(f"Request body is nested deeper than the limit of {limits.max_json_depth} "
                                 "levels.", code="json_too_deep") from None
        raise InvalidRequest(f"Request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("Request body must be a JSON object.", code="invalid_json")
    _check_depth(raw, body, limits.max_json_depth)
    return body


def check_headers(headers: Mapping[str, str]) -> None:
    # Prefix first: on the hot path most headers are not ours, and none is unknown: one plain loop,
    # with the set and the sort only for a request that is refused.
    for n in headers:
        if n[:len(HEADER_PREFIX)].lower() == HEADER_PREFIX and n.lower() not in KNOWN_HEADERS:
            break
    else:
        return
    ours = (n.lower() for n in headers if n[:len(HEADER_PREFIX)].lower() == HEADER_PREFIX)
    unknown = sorted({n[:64] for n in ours if n not in KNOWN_HEADERS})
    if unknown:
        raise InvalidRequest(f"Unknown header(s) {', '.join(unknown)}. Known: {', '.join(sorted(KNOWN_HEADERS))}.",
                             param=unknown[0], code="unknown_header")


def _check_messages(messages: Any, max_messages: int) -> int:
    """Validate the shape of `messages`; return the number of content characters."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array.", param="messages")
    if len(messages) > max_messages:
        raise InvalidRequest(f"'messages' has {len(messages)} entries; the limit is {max_messages}.",
                             param="messages", code="too_many_messages")
    chars = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"'messages[{i}]' must be an object.", param=f"messages[{i}]")
        role = message.get("role")
        if not isinstance(role, str) or role not in _ROLES:
            what = "a string" if not isinstance(role, str) else f"one of {', '.join(ROLES)}; got '{role[:64]}'"
            raise InvalidRequest(f"'messages[{i}].role' must be {what}.", param=f"messages[{i}].role")
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            # A non-string `text` is the provider's to refuse; here it must not become a TypeError (500).
            chars += sum(len(t) for p in content if isinstance(p, dict) and isinstance(t := p.get("text"), str))
    return chars


def _check_optional(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> None:
    value = body.get(name)
    # bool is an int subclass: `"max_tokens": true` must not pass as a number.
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise InvalidRequest(f"'{name}' must be {what}.", param=name)


def invalid_fields(err: ValidationError, within: str = "") -> InvalidRequest:
    """A pydantic error about a JSON object (`within`: its name in the body; "" for the body itself)
    as a 400 naming the field: every unknown field at once, else the first problem."""
    errors = err.errors()
    prefix = f"{within}." if within else ""
    paths = [prefix + ".".join(str(p)[:64] for p in clean_loc(e["loc"])) for e in errors]
    unknown = [path for path, e in zip(paths, errors, strict=True) if e["type"] == "extra_forbidden"]
    if unknown:  # all of them at once, so that a client fixes its request in one go
        where = f"'{within}': unknown" if within else "Unknown"
        return InvalidRequest(f"{where} field(s) {', '.join(unknown)}.", param=unknown[0])
    if not paths[0]:  # the object itself, e.g. null where an object belongs
        return InvalidRequest(f"'{within or 'body'}': {errors[0]['msg']}.", param=within or None)
    return InvalidRequest(f"'{paths[0]}': {errors[0]['msg']}.", param=paths[0])


def _provider_options(raw: Any) -> ProviderOptions | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("'provider' must be an object.", param="provider")
    try:
        return ProviderOptions.model_validate(raw)
    except ValidationError as err:
        raise invalid_fields(err, "provider") from None


def _check_openrouter_fields(body: Mapping[str, Any]) -> None:
    """OpenRouter's `route`, `transforms` and `usage`: accepted for compatibility, never forwarded,
    so held to their documented shapes rather than let anything through."""
    route = body.get("route")
    if route is not None and route != "fallback":
        raise InvalidRequest("'route' must be \"fallback\".", param="route")
    transforms = body.get("transforms")
    if transforms is not None and (not isinstance(transforms, list)
                                   or not all(isinstance(t, str) for t in transforms)):
        raise InvalidRequest("'transforms' must be an array of strings.", param="transforms")
    usage = body.get("usage")
    if usage is None:
        return
    if not isinstance(usage, dict):
        raise InvalidRequest("'usage' must be an object.", param="usage")
    unknown = sorted(f"usage.{k[:64]}" for k in usage if k not in USAGE_FIELDS)
    if unknown:
        raise InvalidRequest(f"'usage': unknown field(s) {', '.join(unknown)}; known: usage.include.",
                             param=unknown[0])
    if not isinstance(usage.get("include", False), bool):
        raise InvalidRequest("'usage.include' must be a boolean.", param="usage.include")


def _session_key(body: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    session_id = body.get("session_id")
    if session_id is not None and not isinstance(session_id, str):
        raise InvalidRequest("'session_id' must be a string.", param="session_id")
    cache_key = body.get("prompt_cache_key")
    if cache_key is not None and not isinstance(cache_key, str):
        raise InvalidRequest("'prompt_cache_key' must be a string.", param="prompt_cache_key")
    # Anthropic's `metadata.user_id` (and a chat body's own `metadata`): one agent session per user id
    # where nothing closer names the conversation. Not validated: `metadata` is the provider's field.
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    return session_id or headers.get("x-session-id") or cache_key or \
        (user_id if isinstance(user_id, str) else None) or None


def parse_chat_request(
    raw: bytes, headers: Mapping[str, str], request_id: str, limits: GatewayFile
) -> ChatRequest:
    """Parse and validate the body within `limits` (the `gateway:` section); headers only supply the
    session key, the priority and the metadata switch."""
    check_headers(headers)
    return chat_request_from(parse_json_body(raw, limits), headers, request_id, limits)


def check_model(body: Mapping[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model or len(model) > MAX_MODEL_NAME:
        raise InvalidRequest(f"'model' is required and must be a non-empty string of at most {MAX_MODEL_NAME} "
                             "characters.", param="model")
    return model


def chat_request_from(
    body: dict[str, Any], headers: Mapping[str, str], request_id: str, limits: GatewayFile, *,
    api: str = "chat", upstream: str = "chat", prompt_chars: int | None = None, origin: Any = None,
    dropped: tuple[str, ...] = (), capability_fields: tuple[tuple[str, str, str], ...] = (),
    client_body: dict[str, Any] | None = None, client_betas: str | None = None,
    untranslatable: InvalidRequest | None = None,
) -> ChatRequest:
    """A `ChatRequest` from a parsed body in the upstream API's shape (`upstream`: chat, completions or
    embeddings). Client APIs other than chat translate their body first (`gateway/apis/`) and pass
    their own parsed request as `origin`, and the prompt size when the body has no `messages`; and
    the body as sent (`client_body`), for an endpoint that speaks their API (gateway/upstreams/)."""
    model = check_model(body)
    if prompt_chars is None:
        prompt_chars = _check_messages(body.get("messages"), limits.max_messages)
    # (Each check only for a field the body has: most bodies have two or three of these.)
    stream_raw = body.get("stream")
    if stream_raw is not None:
        _check_optional(body, "stream", bool, "a boolean")
    stream_options = body.get("stream_options")
    if stream_options is not None:
        _check_optional(body, "stream_options", dict, "an object")
    for name in ("max_tokens", "max_completion_tokens", "n"):
        value = body.get(name)
        if value is None:
            continue
        if type(value) is float and value.is_integer():
            body[name] = int(value)  # 16.0 is an integer to JSON Schema; providers may not agree
        _check_optional(body, name, int, "an integer")
        if isinstance(body.get(name), int) and body[name] < 1:
            raise InvalidRequest(f"'{name}' must be >= 1.", param=name)

    provider = body.get("provider")
    options = _provider_options(provider) if provider is not None else None
    if not _OPENROUTER_FIELDS.isdisjoint(body):
        _check_openrouter_fields(body)
    speed_raw = body.get("speed")
    speed: Speed | None = None
    if speed_raw is not None:
        try:
            speed = Speed(speed_raw)  # only one of the three strings; any other JSON value is a ValueError
        except ValueError:
            raise InvalidRequest("'speed' must be one of standard, fast, ultrafast.", param="speed") from None
    service_tier = body.get("service_tier")
    forward = dict(body) if GATEWAY_FIELDS.isdisjoint(body) else \
        {k: v for k, v in body.items() if k not in GATEWAY_FIELDS}
    if service_tier in FAST_SERVICE_TIERS:
        speed = speed or Speed.FAST
        del forward["service_tier"]

    fallback = body.get("models")
    if fallback is not None and (
        not isinstance(fallback, list) or not all(isinstance(m, str) and m for m in fallback)
    ):
        raise InvalidRequest("'models' must be an array of model names.", param="models")
    if fallback is not None and (len(fallback) > MAX_FALLBACK_MODELS or any(len(m) > MAX_MODEL_NAME for m in fallback)):
        raise InvalidRequest(f"'models' may name at most {MAX_FALLBACK_MODELS} models of at most {MAX_MODEL_NAME} "
                             "characters each.", param="models")
    session_key = _session_key(body, headers)

    priority = headers.get("x-ultraroute-priority", "normal")
    if priority not in ("high", "normal", "low"):
        raise InvalidRequest("x-ultraroute-priority must be one of high, normal, low.", param="x-ultraroute-priority")
    stream = bool(stream_raw)
    include_usage = stream and bool((stream_options or {}).get("include_usage"))
    fallback_models = tuple(fallback or ())
    want_metadata = headers.get("x-ultraroute-metadata", "").lower() == "enabled"
    # Positional, each a variable named as its field (`forward`: body), in ChatRequest's order: 20
    # keywords are matched one by one against the parameters, ~9k instructions a request.
    return ChatRequest(request_id, forward, model, stream, include_usage, prompt_chars, fallback_models, session_key,
                       want_metadata, options, speed, priority, api, upstream, origin, dropped, capability_fields,
                       client_body, client_betas, untranslatable)
