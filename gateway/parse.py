"""Stage 1, parse: request bytes and headers -> a `ChatRequest`, or a 400/413 naming the bad param.

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

from gateway.configfile import clean_loc
from gateway.context import ChatRequest
from gateway.errors import InvalidRequest, PayloadTooLarge
from gateway.policy import ProviderOptions, Speed

# Body fields that belong to the gateway, never to the provider.
GATEWAY_FIELDS = frozenset({"provider", "speed", "models", "session_id", "route", "transforms", "usage"})
# OpenRouter's service_tier values that mean "the fast tier"; others ("auto", "flex", ...) pass through.
FAST_SERVICE_TIERS = frozenset({"priority", "fast"})


def parse_json_body(raw: bytes, max_bytes: int) -> dict[str, Any]:
    if len(raw) > max_bytes:
        raise PayloadTooLarge(f"Request body is {len(raw)} bytes; the limit is {max_bytes}.")
    if not raw:
        raise InvalidRequest("Request body is empty; expected a JSON object.", code="invalid_json")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"Request body is not valid JSON: {exc}", code="invalid_json") from None
    if not isinstance(body, dict):
        raise InvalidRequest("Request body must be a JSON object.", code="invalid_json")
    return body


def _check_messages(messages: Any) -> int:
    """Validate the shape of `messages`; return the number of content characters."""
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("'messages' must be a non-empty array.", param="messages")
    chars = 0
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"'messages[{i}]' must be an object.", param=f"messages[{i}]")
        if not isinstance(message.get("role"), str):
            raise InvalidRequest(f"'messages[{i}].role' must be a string.", param=f"messages[{i}].role")
        content = message.get("content")
        if isinstance(content, str):
            chars += len(content)
        elif isinstance(content, list):
            chars += sum(len(p.get("text", "")) for p in content if isinstance(p, dict))
    return chars


def _check_optional(body: Mapping[str, Any], name: str, kind: type | tuple[type, ...], what: str) -> None:
    value = body.get(name)
    # bool is an int subclass: `"max_tokens": true` must not pass as a number.
    if value is not None and (not isinstance(value, kind) or (kind is int and isinstance(value, bool))):
        raise InvalidRequest(f"'{name}' must be {what}.", param=name)


def _provider_options(raw: Any) -> ProviderOptions | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("'provider' must be an object.", param="provider")
    try:
        return ProviderOptions.model_validate(raw)
    except ValidationError as err:
        first = err.errors()[0]
        path = ".".join(str(p) for p in clean_loc(first["loc"]))
        kind = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        raise InvalidRequest(f"'provider.{path}': {kind}.", param=f"provider.{path}") from None


def parse_chat_request(
    raw: bytes, headers: Mapping[str, str], request_id: str, max_bytes: int
) -> ChatRequest:
    """Parse and validate the body; headers only supply the session key and the metadata switch."""
    body = parse_json_body(raw, max_bytes)

    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise InvalidRequest("'model' is required and must be a non-empty string.", param="model")
    prompt_chars = _check_messages(body.get("messages"))
    _check_optional(body, "stream", bool, "a boolean")
    _check_optional(body, "stream_options", dict, "an object")
    for name in ("max_tokens", "max_completion_tokens", "n"):
        _check_optional(body, name, int, "an integer")
        if isinstance(body.get(name), int) and body[name] < 1:
            raise InvalidRequest(f"'{name}' must be >= 1.", param=name)

    options = _provider_options(body.get("provider"))
    speed_raw = body.get("speed")
    speed: Speed | None = None
    if speed_raw is not None:
        try:
            speed = Speed(speed_raw)
        except ValueError:
            raise InvalidRequest("'speed' must be one of standard, fast, ultrafast.", param="speed") from None
    service_tier = body.get("service_tier")
    forward = {k: v for k, v in body.items() if k not in GATEWAY_FIELDS}
    if service_tier in FAST_SERVICE_TIERS:
        speed = speed or Speed.FAST
        del forward["service_tier"]

    fallback = body.get("models")
    if fallback is not None and (
        not isinstance(fallback, list) or not all(isinstance(m, str) and m for m in fallback)
    ):
        raise InvalidRequest("'models' must be an array of model names.", param="models")
    session = body.get("session_id") or headers.get("x-session-id") or body.get("prompt_cache_key")
    if session is not None and not isinstance(session, str):
        raise InvalidRequest("'session_id' must be a string.", param="session_id")

    priority = headers.get("x-ultraroute-priority", "normal")
    if priority not in ("high", "normal", "low"):
        raise InvalidRequest("x-ultraroute-priority must be one of high, normal, low.", param="x-ultraroute-priority")
    stream = bool(body.get("stream"))
    stream_options = body.get("stream_options") or {}
    return ChatRequest(
        request_id=request_id,
        body=forward,
        model=model,
        stream=stream,
        include_usage=stream and bool(stream_options.get("include_usage")),
        prompt_chars=prompt_chars,
        fallback_models=tuple(fallback or ()),
        session_key=session,
        want_metadata=headers.get("x-ultraroute-metadata", "").lower() == "enabled",
        options=options,
        speed=speed,
        priority=priority,
    )
