"""The provider side, one module per upstream wire API, as `apis/` is the client side.

    openai_chat        OpenAI chat completions (and its legacy completions and embeddings): the
                       gateway's own event language, so its stream is read as it is
    anthropic          Anthropic Messages: `speed` and its beta header, `x-api-key`
    openai_responses   OpenAI Responses

Each module makes the `Outgoing` request of a `ChatRequest` for an endpoint (body, path, headers)
and, for an API that is not chat completions, a `Translator` that turns that API's stream events
into the chat-completion chunks the gateway measures and renders (first token, usage with cached
tokens, the served tier, finish, errors). The dispatcher asks `outgoing()` and never learns which API
an endpoint speaks; a fourth API is one more module here and one more name in the catalogue's
`api` enum.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.upstreams import anthropic, openai_chat, openai_responses
from gateway.upstreams.wire import Outgoing, Translator

if TYPE_CHECKING:
    from gateway.config import Endpoint
    from gateway.context import ChatRequest

__all__ = ["Outgoing", "Translator", "outgoing"]

_BUILDERS: dict[str, Callable[[ChatRequest, Endpoint], Outgoing]] = {
    "openai": openai_chat.outgoing,
    "anthropic": anthropic.outgoing,
    "openai-responses": openai_responses.outgoing,
}


def outgoing(request: ChatRequest, endpoint: Endpoint) -> Outgoing:
    """The request to send `endpoint` for `request`, in the API its provider speaks."""
    return _BUILDERS[endpoint.provider.api](request, endpoint)
