"""Parsing: unknown fields pass through, gateway fields are stripped, bad input names the param."""

from __future__ import annotations

import orjson
import pytest

from gateway.errors import InvalidRequest, PayloadTooLarge
from gateway.parse import parse_chat_request
from gateway.policy import Sort, Speed


def parse(body: object, headers: dict[str, str] | None = None, max_bytes: int = 1 << 20):
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    return parse_chat_request(raw, headers or {}, "rid", max_bytes)


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
