"""Parsing: unknown fields pass through, gateway fields are stripped, bad input names the param.
Hostile input (issue "Access control, budgets and hostile input"): size, depth and message-count caps,
strictly typed gateway fields, unknown `x-ultraroute-*` headers."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from pydantic import ValidationError
from starlette.requests import Request
from starlette.types import Message

from gateway.config import GatewayFile
from gateway.errors import InvalidRequest, PayloadTooLarge
from gateway.parse import header_map, parse_chat_request, read_body
from gateway.policy import Sort, Speed


def parse(body: object, headers: dict[str, str] | None = None, max_bytes: int = 1 << 20, **limits: Any):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return parse_chat_request(raw, headers or {}, "rid", GatewayFile(max_body_bytes=max_bytes, **limits))


MSG = [{"role": "user", "content": "hello"}]


def test_passthrough_and_gateway_fields() -> None:
    req = parse({"model": "m:nitro", "messages": MSG, "temperature": 0.2, "tools": [], "stream": True,
                 "stream_options": {"include_usage": True}, "speed": "fast",
                 "provider": {"sort": "tps", "only": ["a"]}, "models": ["b"], "session_id": "s1"})
    assert req.body["temperature"] == 0.2 and req.body["tools"] == []
    assert not {"speed", "provider", "models", "session_id"} & set(req.body)
    assert req.stream and req.include_usage and req.speed is Speed.FAST
    assert req.options is not None and req.options.sort_key is Sort.THROUGHPUT
    assert req.fallback_models == ("b",) and req.session_key == "s1" and req.prompt_chars == 5


def test_service_tier_priority_means_fast() -> None:
    req = parse({"model": "m", "messages": MSG, "service_tier": "priority"})
    assert req.speed is Speed.FAST and "service_tier" not in req.body
    assert parse({"model": "m", "messages": MSG, "service_tier": "auto"}).body["service_tier"] == "auto"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": MSG}, "model"),
        ({"model": "", "messages": MSG}, "model"),
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": ["x"]}, "messages[0]"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": MSG, "stream": "yes"}, "stream"),
        ({"model": "m", "messages": MSG, "max_tokens": True}, "max_tokens"),
        ({"model": "m", "messages": MSG, "max_tokens": 0}, "max_tokens"),
        ({"model": "m", "messages": MSG, "speed": "warp"}, "speed"),
        ({"model": "m", "messages": MSG, "provider": {"sort": "fastest"}}, "provider.sort"),
        ({"model": "m", "messages": MSG, "provider": {"colour": 1}}, "provider.colour"),
        ({"model": "m", "messages": MSG, "models": "b"}, "models"),
    ],
)
def test_bad_fields_name_the_param(body: dict, param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse(body)
    assert info.value.param == param and info.value.status == 400


def test_invalid_json_and_size() -> None:
    with pytest.raises(InvalidRequest, match="not valid JSON"):
        parse(b"{nope")
    with pytest.raises(InvalidRequest, match="JSON object"):
        parse(b"[1]")
    with pytest.raises(PayloadTooLarge) as info:
        parse({"model": "m", "messages": [{"role": "user", "content": "x" * 2000}]}, max_bytes=1024)
    assert info.value.status == 413


# --- hostile input -----------------------------------------------------------------------------


class FakeReceive:
    """An ASGI `receive` that hands out body chunks and counts how many were asked for."""

    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.calls = 0

    async def __call__(self) -> Message:
        self.calls += 1
        i = self.calls - 1
        if i >= len(self.chunks):
            return {"type": "http.disconnect"}
        return {"type": "http.request", "body": self.chunks[i], "more_body": i < len(self.chunks) - 1}


def request_with(chunks: list[bytes], content_length: int | None) -> tuple[Request, FakeReceive]:
    headers = [(b"content-type", b"application/json")]
    if content_length is not None:
        headers.append((b"content-length", str(content_length).encode()))
    receive = FakeReceive(chunks)
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": headers}
    return Request(scope, receive), receive


async def test_read_body_refuses_declared_length_without_reading() -> None:
    request, receive = request_with([b"x" * 4000], content_length=4000)
    with pytest.raises(PayloadTooLarge) as info:
        await read_body(request, 1024)
    assert info.value.status == 413 and "1024" in info.value.message
    assert receive.calls == 0  # refused on the header alone


async def test_read_body_stops_a_chunked_upload_at_the_cap() -> None:
    request, receive = request_with([b"x" * 600] * 10, content_length=None)
    with pytest.raises(PayloadTooLarge):
        await read_body(request, 1024)
    assert receive.calls == 2  # 1200 bytes passed the cap: the other eight chunks were never read


async def test_read_body_under_the_cap() -> None:
    request, _ = request_with([b'{"a":', b" 1}"], content_length=None)
    assert await read_body(request, 1024) == b'{"a": 1}'
    request, _ = request_with([b"x" * 1024], content_length=1024)
    assert await read_body(request, 1024) == b"x" * 1024  # the cap itself is allowed


def nested(depth: int) -> dict[str, Any]:
    """A chat body whose deepest container is at `depth` (the body object is level 1)."""
    value: Any = {}
    for i in range(depth - 2):  # `{}` is one level and the body another
        value = [value] if i % 2 else {"k": value}
    return {"model": "m", "messages": MSG, "extra": value}


def test_json_depth_cap() -> None:
    parse(nested(16), max_json_depth=16)
    with pytest.raises(InvalidRequest) as info:
        parse(nested(17), max_json_depth=16)
    assert info.value.status == 400 and info.value.code == "json_too_deep" and "16" in info.value.message
    # Past orjson's own limit (1024) its error is reported the same way, not as a 500.
    with pytest.raises(InvalidRequest) as deep:
        parse(b'{"model": "m", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert deep.value.status == 400 and deep.value.code == "json_too_deep"



def test_json_depth_counts_levels_not_brackets() -> None:
    # More brackets than the cap (siblings, and some inside a string) on three levels: accepted.
    parse({"model": "m", "messages": MSG, "extra": [{} for _ in range(20)], "note": "[[[[{{{{"}, max_json_depth=4)
    with pytest.raises(InvalidRequest):
        parse({"model": "m", "messages": MSG, "extra": [[[{}]]]}, max_json_depth=4)


def test_json_depth_default_allows_real_bodies() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "string"}}}}}}}}]
    content = [{"type": "image_url", "image_url": {"url": "data:,"}}, {"type": "text", "text": "hi"}]
    req = parse({"model": "m", "messages": [{"role": "user", "content": content}], "tools": tools})
    assert req.body["tools"] == tools and req.prompt_chars == 2
    with pytest.raises(InvalidRequest, match="64"):
        parse(nested(65))


def test_message_count_cap() -> None:
    assert parse({"model": "m", "messages": MSG * 50}, max_messages=50).prompt_chars == 250
    with pytest.raises(InvalidRequest) as info:
        parse({"model": "m", "messages": MSG * 51}, max_messages=50)
    assert (info.value.status, info.value.param, info.value.code) == (400, "messages", "too_many_messages")
    assert "50" in info.value.message


def test_limits_have_defaults_and_floors() -> None:
    assert (GatewayFile().max_json_depth, GatewayFile().max_messages) == (64, 4096)
    for bad in ({"max_json_depth": 1}, {"max_messages": 0}, {"max_messages": "many"}):
        with pytest.raises(ValidationError):
            GatewayFile(**bad)


def test_non_string_text_part_is_not_a_crash() -> None:
    content = [{"type": "text", "text": 5}, {"type": "text", "text": "abc"}]
    assert parse({"model": "m", "messages": [{"role": "user", "content": content}]}).prompt_chars == 3


def test_openrouter_fields_accepted_and_stripped() -> None:
    req = parse({"model": "m", "messages": MSG, "route": "fallback", "transforms": ["middle-out"],
                 "usage": {"include": True}, "session_id": "s"})
    assert not {"route", "transforms", "usage", "session_id"} & set(req.body)


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"route": "fastest"}, "route"),
        ({"route": ["fallback"]}, "route"),
        ({"transforms": "middle-out"}, "transforms"),
        ({"transforms": ["middle-out", 1]}, "transforms"),
        ({"usage": True}, "usage"),
        ({"usage": {"include": "yes"}}, "usage.include"),
        ({"usage": {"include": True, "verbose": 1}}, "usage.verbose"),
        ({"session_id": 5}, "session_id"),
        ({"session_id": 0}, "session_id"),  # falsy, so it used to slip through unchecked
        ({"prompt_cache_key": ["k"]}, "prompt_cache_key"),
        ({"speed": ["fast"]}, "speed"),
        ({"speed": 1}, "speed"),
        ({"models": ["b", ""]}, "models"),
        ({"models": [{"url": "http://127.0.0.1/"}]}, "models"),
        ({"provider": []}, "provider"),
        ({"provider": {"allow_fallbacks": "yes"}}, "provider.allow_fallbacks"),
        ({"provider": {"require_parameters": 1}}, "provider.require_parameters"),
        ({"provider": {"hedge_after_ms": "100"}}, "provider.hedge_after_ms"),
        ({"provider": {"max_price": {"prompt": "1"}}}, "provider.max_price.prompt"),
        ({"provider": {"preferred_min_throughput": "10"}}, "provider.preferred_min_throughput"),
        ({"provider": {"order": "a"}}, "provider.order"),
        ({"provider": {"order": ["a", 1]}}, "provider.order.1"),
        ({"provider": {"base_url": "http://127.0.0.1/"}}, "provider.base_url"),
    ],
)
def test_gateway_fields_are_strictly_typed(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse({"model": "m", "messages": MSG, **extra})
    assert info.value.param == param and info.value.status == 400
    assert param.split(".")[0] in info.value.message


def test_unknown_fields_are_all_named() -> None:
    with pytest.raises(InvalidRequest) as info:
        parse({"model": "m", "messages": MSG, "provider": {"colour": 1, "endpoint": "http://x", "sort": "price"}})
    assert info.value.param == "provider.colour"
    assert "provider.colour" in info.value.message and "provider.endpoint" in info.value.message
    with pytest.raises(InvalidRequest) as usage:
        parse({"model": "m", "messages": MSG, "usage": {"b": 1, "a": 2}})
    assert usage.value.param == "usage.a" and "usage.a, usage.b" in usage.value.message


def test_numbers_and_flags_still_accepted() -> None:
    req = parse({"model": "m", "messages": MSG, "provider": {
        "allow_fallbacks": False, "hedge_after_ms": 150, "max_price": {"prompt": 1, "completion": 2.5},
        "preferred_max_latency": {"p90": 2}}})
    assert req.options is not None and req.options.hedge_after_ms == 150 and req.options.allow_fallbacks is False


def test_unknown_ultraroute_headers_are_refused() -> None:
    known = {"x-ultraroute-policy": "default", "x-ultraroute-speed": "fast", "x-ultraroute-priority": "high",
             "x-ultraroute-metadata": "enabled", "x-other": "ok"}
    assert parse({"model": "m", "messages": MSG}, known).want_metadata
    with pytest.raises(InvalidRequest) as info:
        parse({"model": "m", "messages": MSG}, {**known, "x-ultraroute-endpoint": "http://127.0.0.1:9/v1"})
    assert info.value.status == 400 and info.value.param == "x-ultraroute-endpoint"
    assert "x-ultraroute-endpoint" in info.value.message
    with pytest.raises(InvalidRequest) as two:
        parse({"model": "m", "messages": MSG}, {"X-Ultraroute-Zeta": "1", "x-ultraroute-alpha": "1"})
    assert two.value.param == "x-ultraroute-alpha"
    assert "x-ultraroute-alpha, x-ultraroute-zeta" in two.value.message


def test_integral_floats_are_integers() -> None:
    # JSON Schema (and so schemathesis and some SDKs) treats 16.0 as an integer; forward it as 16.
    request = parse({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 16.0})
    assert request.body["max_tokens"] == 16 and type(request.body["max_tokens"]) is int
    with pytest.raises(InvalidRequest) as err:
        parse({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 16.5})
    assert err.value.param == "max_tokens"


def test_model_names_and_fallback_lists_are_bounded() -> None:
    with pytest.raises(InvalidRequest) as err:
        parse({"model": "m" * 257, "messages": MSG})
    assert err.value.param == "model"
    with pytest.raises(InvalidRequest) as err:
        parse({"model": "m", "messages": MSG, "models": ["a"] * 33})
    assert err.value.param == "models"
    with pytest.raises(InvalidRequest) as err:
        parse({"model": "m", "messages": MSG, "models": ["a" * 257]})
    assert err.value.param == "models"
    assert parse({"model": "m" * 256, "messages": MSG, "models": ["a"] * 32}).fallback_models == ("a",) * 32


def test_the_header_map_keeps_the_first_of_a_repeated_name_as_starlette_does() -> None:
    raw = [(b"host", b"gw"), (b"x-ultraroute-speed", b"fast"), (b"x-ultraroute-speed", b"standard"),
           (b"x-session-id", b"caf\xe9")]
    headers = header_map(raw)
    starlette = Request({"type": "http", "headers": raw}).headers
    for name in ("host", "x-ultraroute-speed", "x-session-id", "x-ultraroute-policy"):
        assert headers.get(name) == starlette.get(name)
    assert headers["x-ultraroute-speed"] == "fast" and headers["x-session-id"] == "café"


def test_the_session_key_is_any_of_the_names_a_client_gives_its_conversation() -> None:
    assert parse({"model": "m", "messages": MSG, "prompt_cache_key": "k1"}).session_key == "k1"
    assert parse({"model": "m", "messages": MSG, "metadata": {"user_id": "u1"}}).session_key == "u1"
    assert parse({"model": "m", "messages": MSG, "metadata": {"user_id": 7}}).session_key is None
    both = parse({"model": "m", "messages": MSG, "metadata": {"user_id": "u1"}, "prompt_cache_key": "k1"})
    assert both.session_key == "k1"  # the conversation's own name before the user's
    assert parse({"model": "m", "messages": MSG}).session_key is None
