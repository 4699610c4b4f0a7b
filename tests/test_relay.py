"""`relay.PublicModel`: the provider's chunk bytes passed on with only `model` changed, and the same
JSON as re-encoding the chunk would give whenever the bytes cannot be patched safely; `relay.sse_body`
closes the attempt when the body ends."""

from __future__ import annotations

from typing import Any

import orjson

from gateway.errors import GatewayError, UpstreamError
from gateway.relay import PublicModel, sse_body
from gateway.upstreams.sse import DONE_EVENT
from gateway.upstreams.stream import Meter


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


class Batches:
    """An upstream stream as `sse_body` reads it: these batches of events, then its end (or `failure`)."""

    def __init__(self, *batches: list[tuple[bytes, dict[str, Any]]], failure: GatewayError | None = None) -> None:
        self.batches = list(batches)
        self.meter = Meter(t_sent=0.0)
        self.answer: list[str] = []
        self.failure: GatewayError | None = None
        self.breaks = failure

    async def next_batch(self) -> list[tuple[bytes, dict[str, Any]]] | None:
        if self.batches:
            return self.batches.pop(0)
        if self.breaks is not None:
            raise self.breaks
        return None


async def test_the_body_closes_the_attempt_once_it_ends_and_says_if_it_was_cut_short() -> None:
    closed: list[bool] = []

    async def close(cut_short: bool) -> None:
        closed.append(cut_short)

    whole = [part async for part in sse_body(Batches([chunk(model="up")]), "public", False, close=close)]  # type: ignore[arg-type]
    assert whole[-1] == DONE_EVENT and closed == [False]

    broken = Batches([chunk(model="up")], failure=UpstreamError("gone", status=502))
    parts = [part async for part in sse_body(broken, "public", False, close=close)]  # type: ignore[arg-type]
    assert b"error" in parts[-1] and closed == [False, False]  # ended with its error event, not cut short

    body = sse_body(Batches([chunk(model="up")], [chunk(model="up")]), "public", False, close=close)  # type: ignore[arg-type]
    first = await anext(body)
    assert b'"model":"public"' in first and closed == [False, False]  # the first write waits for nothing
    await body.aclose()  # the client left
    assert closed == [False, False, True]


def test_renamed_patches_a_nested_model_once_or_says_it_cannot() -> None:
    public = PublicModel("public")
    event = b'{"type":"response.created","response":{"id":"r","model":"up-model","text":"caf\\u00e9"}}'
    assert public.renamed(event, "up-model") == event.replace(b'"model":"up-model"', b'"model":"public"')
    twice = b'{"response":{"model":"up-model","x":{"model":"up-model"}}}'
    assert public.renamed(twice, "up-model") is None
    assert public.renamed(b'{"response":{"model": "up-model"}}', "up-model") is None
