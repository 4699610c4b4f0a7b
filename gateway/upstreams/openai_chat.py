"""OpenAI chat completions upstream (and its legacy completions and embeddings): the gateway's own
event language, so the stream needs no translator.

The body is the request's, with `model` the endpoint's upstream model, the endpoint's `extra_body`
merged, the fields kept only for a capability the endpoint lacks removed (`capability_fields`),
always streaming with usage (so every request is measured), and the endpoint's `service_tier` when
it names one.
"""

from __future__ import annotations

from typing import Any

import orjson

from gateway.config import Endpoint
from gateway.context import ChatRequest
from gateway.upstreams.wire import Outgoing

# Where each upstream API lives under a provider's base URL.
UPSTREAM_PATHS = {"chat": "/chat/completions", "completions": "/completions", "embeddings": "/embeddings"}


def _remove(body: dict[str, Any], key: str) -> None:
    """Remove a body field, or, as `messages.<field>`, that field of every message (e.g. the
    `reasoning_content` of earlier assistant turns). The messages are copied: the request's own body
    stays whole for the next endpoint."""
    if key.startswith("messages."):
        name = key.removeprefix("messages.")
        body["messages"] = [{k: v for k, v in m.items() if k != name} if name in m else m for m in body["messages"]]
    else:
        body.pop(key, None)


def chat_body(request: ChatRequest, endpoint: Endpoint) -> bytes:
    body = {**request.body, **endpoint.extra_body} if endpoint.extra_body else dict(request.body)
    for key, capability, _ in request.capability_fields:
        if capability not in endpoint.capabilities:
            _remove(body, key)
    body["model"] = endpoint.upstream_model
    if endpoint.service_tier is not None:
        body["service_tier"] = endpoint.service_tier
    if request.upstream == "embeddings":
        return orjson.dumps(body)  # one JSON answer: only its latency is measured
    body["stream"] = True  # always: so time to first token and decode rate are measured for every request
    if endpoint.stream_usage:  # else it would be ignored (or refused): the relay estimates usage
        body["stream_options"] = {**(request.body.get("stream_options") or {}), "include_usage": True}
    return orjson.dumps(body)


def outgoing(request: ChatRequest, endpoint: Endpoint) -> Outgoing:
    return Outgoing(chat_body(request, endpoint), UPSTREAM_PATHS[request.upstream])
