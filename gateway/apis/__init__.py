"""The client APIs: one adapter module each, at the two ends of the one pipeline (pipeline.py).

    chat.py          POST /v1/chat/completions   the gateway's own shape (parse.py, relay.py)
    responses.py     POST /v1/responses          OpenAI Responses -> chat; responses_render.py answers;
                     stored.py: GET/DELETE /v1/responses/{id} (sessions/);
                     responses_ws.py: GET /v1/responses upgraded to a WebSocket (many responses)
    messages.py      POST /v1/messages           Anthropic Messages -> chat (content and tools:
                                                 messages_content.py); messages_render.py answers;
                                                 errors in Anthropic's shape; count_tokens.py:
                                                 POST /v1/messages/count_tokens, an estimate
    completions.py   POST /v1/completions        legacy completions, forwarded to `completions` endpoints
    embeddings.py    POST /v1/embeddings         forwarded to `embeddings` endpoints, latency measured

`CLIENT_APIS` is the route table app.py mounts. A new client API is a `ClientApi` subclass in a
module here and one entry in that tuple; nothing else changes.
"""

from __future__ import annotations

from gateway.apis.adapter import ClientApi
from gateway.apis.chat import ChatApi
from gateway.apis.completions import CompletionsApi
from gateway.apis.embeddings import EmbeddingsApi
from gateway.apis.messages import MessagesApi
from gateway.apis.stored import RESPONSES, stored_responses_router

CLIENT_APIS: tuple[ClientApi, ...] = (ChatApi(), RESPONSES, MessagesApi(), CompletionsApi(), EmbeddingsApi())

__all__ = ["CLIENT_APIS", "ClientApi", "stored_responses_router"]
