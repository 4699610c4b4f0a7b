"""The provider side, one module per upstream wire API, as `apis/` is the client side.

    openai_chat        OpenAI chat completions (and its legacy completions and embeddings): the
                       gateway's own event language, so its stream is read as it is
    anthropic          Anthropic Messages: `speed` and its beta header, `x-api-key`
    openai_responses   OpenAI Responses
    wire               what they share: `Outgoing` (a request to send) and the `Translator` protocol
    passthrough        a same-API client handed the upstream's own events and answer
    messages_answer    a Messages pass-through JSON answer assembled from its stream's events

and the plumbing every API shares:

    client             the only HTTP client of providers: one pooled aiohttp session per provider
                       (httpx only as the tests' `MockTransport` seam)
    aiohttp_tuned      aiohttp's connection tuned for streams: less Python per HTTP chunk
    limit_headers      providers' rate-limit headers (Anthropic's and OpenAI's), read in one place
    attempt            one attempt at one endpoint up to its first token: the request, a non-200
                       turned into its error, the first-chunk gate
    stream             reading one upstream stream: the first-token gate, the batches after it, timings
    meter              the timings and counts of one attempt, as its stream is read
    sse                splitting a byte stream into `data:` payloads, and writing events back out
    assemble           one `chat.completion` from streamed chunks, for clients that did not stream

Each module makes the `Outgoing` request of a `ChatRequest` for an endpoint (body, path, headers)
and, for an API that is not chat completions, a `Translator` that turns that API's stream events
into the chat-completion chunks the gateway measures and renders (first token, usage with cached
tokens, the served tier, finish, errors). The dispatcher asks `outgoing()` and never learns which API
an endpoint speaks; a fourth API is one more module here and one more name in the catalogue's
`api` enum.

`passes_through()` says whether an endpoint gets the client's body as sent (same API in and out):
then nothing the client API's adapter dropped or refused for translation applies (`dropped_for()`,
`ChatRequest.untranslatable`); the client body was parsed once, and translated once, either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.upstreams import anthropic, openai_chat, openai_responses
from gateway.upstreams.wire import Outgoing, Translator

if TYPE_CHECKING:
    from gateway.config import Endpoint
    from gateway.context import ChatRequest

__all__ = ["Outgoing", "Translator", "dropped_for", "outgoing", "passes_through"]

_BUILDERS: dict[str, Callable[[ChatRequest, Endpoint], Outgoing]] = {
    "openai": openai_chat.outgoing,
    "anthropic": anthropic.outgoing,
    "openai-responses": openai_responses.outgoing,
}


def outgoing(request: ChatRequest, endpoint: Endpoint) -> Outgoing:
    """The request to send `endpoint` for `request`, in the API its provider speaks."""
    return _BUILDERS[endpoint.provider.api](request, endpoint)


_SAME_API: dict[str, Callable[[ChatRequest], bool]] = {
    "anthropic": anthropic.passes_through,
    "openai-responses": openai_responses.passes_through,
}


def passes_through(request: ChatRequest, endpoint: Endpoint) -> bool:
    """Whether `endpoint` is passed the client's body as sent (lossless), not a translation."""
    same = _SAME_API.get(endpoint.provider.api)
    return same is not None and same(request)


def dropped_for(request: ChatRequest, endpoint: Endpoint) -> tuple[str, ...]:
    """The client API fields this endpoint does not get (`x-ultraroute-dropped`): none when it is
    passed the body as sent; else what the adapter dropped for every translation, then the fields kept
    only for endpoints with a capability this one lacks."""
    if not request.dropped and not request.capability_fields:
        return ()
    if passes_through(request, endpoint):
        return ()
    if not request.capability_fields:
        return request.dropped
    lacking = tuple(name for _, capability, name in request.capability_fields
                    if capability not in endpoint.capabilities and name not in request.dropped)
    return request.dropped + lacking
