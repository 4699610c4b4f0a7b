"""`relay.PublicModel`: the provider's chunk bytes passed on with only `model` changed, and the same
JSON as re-encoding the chunk would give whenever the bytes cannot be patched safely."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.relay import PublicModel


def chunk(**fields: Any) -> tuple[bytes, dict[str, Any]]:
    data = {"id": "c1", "object": "chat.completion.chunk", "created": 1, **fields,
            "choices": [{"index": 0, "delta": {"content": "hi"}}]}
    raw = orjson.dumps(data)
    return raw, orjson.loads(raw)


def test_compact_model_field_is_replaced_in_the_bytes() -> None:
    raw, parsed = chunk(model="up-model")
    out = PublicModel("public")(raw, parsed)
    assert out == raw.replace(b'"model":"up-model"', b'"model":"public"')
    assert orjson.loads(out) == {**orjson.loads(raw), "model": "public"}


def test_chunk_already_named_public_passes_unchanged() -> None:
    raw, parsed = chunk(model="public")
    assert PublicModel("public")(raw, parsed) is raw


def test_spaced_missing_or_repeated_model_is_re_encoded() -> None:
    public = PublicModel("public")
    spaced = b'{"id": "c1", "model": "up-model", "choices": []}'
    assert orjson.loads(public(spaced, orjson.loads(spaced))) == {"id": "c1", "model": "public", "choices": []}
    missing = b'{"id":"c1","choices":[]}'
    assert orjson.loads(public(missing, orjson.loads(missing))) == {"id": "c1", "choices": [], "model": "public"}
    # The provider's model name quoted as a nested field too: not patched blindly.
    nested = b'{"model":"up-model","choices":[{"index":0,"delta":{},"x":{"model":"up-model"}}]}'
    out = orjson.loads(public(nested, orjson.loads(nested)))
    assert out["model"] == "public" and out["choices"][0]["x"] == {"model": "up-model"}


def test_text_that_quotes_the_field_is_left_alone() -> None:
    text = 'say "model":"up-model" please'
    raw = orjson.dumps({"model": "up-model", "choices": [{"index": 0, "delta": {"content": text}}]})
    out = orjson.loads(PublicModel("public")(raw, orjson.loads(raw)))
    assert out["model"] == "public" and out["choices"][0]["delta"]["content"] == text


def test_usage_is_taken_out_when_the_client_did_not_ask() -> None:
    public = PublicModel("public")
    with_null = b'{"id":"c1","model":"up","choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}'
    out = public.without_usage(with_null, orjson.loads(with_null))
    assert out == b'{"id":"c1","model":"public","choices":[{"index":0,"delta":{"content":"a"}}]}'
    with_usage = b'{"id":"c1","model":"up","choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":3}}'
    assert orjson.loads(public.without_usage(with_usage, orjson.loads(with_usage))) == {
        "id": "c1", "model": "public", "choices": [{"index": 0, "delta": {}}]}
