"""Hard filters: which endpoints may serve this request at all, and why the others may not.

Each check returns a short reason or None; the first reason excludes the endpoint and is reported
by `/v1/route` and in the 404 `no_matching_endpoint` message. Checks here depend only on the
catalogue, the request and the preferences -- not on live stats -- so their result can be cached
per (model, preferences, request shape). Health (breakers, cool-downs) is checked by the router.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, NamedTuple

from gateway.config import Endpoint
from gateway.context import ChatRequest, Preferences

# Tokens are ~4 characters of English; a deliberately rough, cheap estimate.
CHARS_PER_TOKEN = 4
COARSE_ABOVE = 4096  # prompt estimates above this many tokens are rounded to a relative grid


class RequestShape(NamedTuple):
    """What the filters need to know about a request; hashable so plans can be cached by it (a tuple:
    made, hashed and compared per request, all in C)."""

    prompt_tokens: int
    max_tokens: int | None
    parameters: frozenset[str]  # capabilities the request uses (tools, response_format, ...)
    upstream: str = "chat"  # the upstream API it needs: chat, completions or embeddings


# The body fields `request_shape` reads capabilities from: most requests have none of them.
_CAPABILITY_FIELDS = frozenset({"tools", "tool_choice", "functions", "response_format", "reasoning",
                                "reasoning_effort", "logprobs", "top_logprobs"})
_NO_CAPABILITIES: frozenset[str] = frozenset()  # most requests': one, not one per request


def request_shape(request: ChatRequest) -> RequestShape:
    body = request.body
    used = set()
    if not _CAPABILITY_FIELDS.isdisjoint(body):
        if body.get("tools") or body.get("tool_choice") or body.get("functions"):
            used.add("tools")
        if body.get("response_format"):
            used.add("response_format")
        if body.get("reasoning") or body.get("reasoning_effort"):
            used.add("reasoning")
        if body.get("logprobs") or body.get("top_logprobs"):
            used.add("logprobs")
    messages: list[Any] = body.get("messages") or []
    if messages and isinstance(messages[-1], dict) and messages[-1].get("role") == "assistant":
        used.add("assistant_prefix")
    max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
    return RequestShape(prompt_size(request.prompt_chars), max_tokens if isinstance(max_tokens, int) else None,
                        frozenset(used) if used else _NO_CAPABILITIES, request.upstream)


def prompt_size(prompt_chars: int) -> int:
    """The prompt's estimated tokens, rounded up so that prompts of similar size share a cached plan: to
    64 tokens up to 4,096, above that to a grid ~4% apart (an agent's context grows every turn; a plan
    per 64 tokens of it would be rebuilt for nearly every request, and chars / 4 is rougher than 4%)."""
    tokens = -(-prompt_chars // CHARS_PER_TOKEN)
    if tokens <= COARSE_ABOVE:
        return -(-tokens // 64) * 64
    step = 1 << max(6, tokens.bit_length() - 5)  # 1/32 of the power of two below: 3-6% of the size
    return -(-tokens // step) * step


def matches(endpoint: Endpoint, names: Iterable[str]) -> bool:
    """`only`/`ignore`/`order` name an endpoint by its id, its provider, or its catalogue key."""
    return any(n in (endpoint.id, endpoint.provider.name, endpoint.key) for n in names)


def exclusion_reason(endpoint: Endpoint, shape: RequestShape, prefs: Preferences, warm: bool = False) -> str | None:
    """`warm`: the endpoint holds the session's cache, leaving no more than `max_uncached_input_tokens`
    uncached (the router judges that: routing/router.py `_warm_holder`)."""
    if not endpoint.available:
        return "unavailable: provider key not set"
    if shape.upstream not in endpoint.apis:
        return f"does not serve the {shape.upstream} API (apis: {', '.join(sorted(endpoint.apis))})"
    if prefs.only is not None and not matches(endpoint, prefs.only):
        return "not in provider.only"
    if prefs.ignore and matches(endpoint, prefs.ignore):
        return "in provider.ignore"
    if prefs.regions is not None and endpoint.region not in prefs.regions:
        return f"region {endpoint.region} not in {list(prefs.regions)}"
    if prefs.quantizations is not None and (endpoint.quantization or "unknown") not in prefs.quantizations:
        return f"quantization {endpoint.quantization or 'unknown'} not in {list(prefs.quantizations)}"
    if prefs.data_collection == "deny" and endpoint.provider.data_collection != "deny":
        return "provider may retain data (data_collection: deny)"
    price = endpoint.price
    if prefs.max_price_prompt is not None or prefs.max_price_completion is not None:
        if price is None:
            return "hourly-priced: no per-token price to compare with max_price"
        if prefs.max_price_prompt is not None and price.input > prefs.max_price_prompt:
            return f"input price {price.input:g} > max_price.prompt {prefs.max_price_prompt:g}"
        if prefs.max_price_completion is not None and price.output > prefs.max_price_completion:
            return f"output price {price.output:g} > max_price.completion {prefs.max_price_completion:g}"
    if endpoint.context_length is not None:  # on the estimate: before the provider refuses it
        needed = shape.prompt_tokens + (shape.max_tokens or 0)
        if needed > endpoint.context_length:
            return f"context length {endpoint.context_length} too small (~{needed} tokens needed)"
    limit = endpoint.max_uncached_input_tokens
    if limit is not None and shape.prompt_tokens > limit and not warm:
        return f"cold prompt ~{shape.prompt_tokens} tokens > max_uncached_input_tokens {limit}"
    if shape.max_tokens and endpoint.max_output_tokens and shape.max_tokens > endpoint.max_output_tokens:
        return f"max_output_tokens {endpoint.max_output_tokens} < max_tokens {shape.max_tokens}"
    if prefs.require_parameters:
        missing = sorted(shape.parameters - endpoint.capabilities)
        if missing:
            return f"does not support {', '.join(missing)} (require_parameters)"
    return None
