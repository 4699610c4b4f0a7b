"""What a client API is to the gateway: an adapter at the two ends of the one pipeline.

    parse          the API's request bytes -> a `ChatRequest` in the upstream API's shape
    recall         (optional, async) add what the request refers to: a stored conversation
    render_json    the assembled upstream answer -> the API's JSON
    stream_renderer  upstream chunks -> the API's own stream events (None: the relay's chat SSE)
    after          (optional) once the answer is out: store it
    error_shape    which shape `errors.error_body()` renders this API's errors in

Renderers are pure: chat-completion chunks (dicts) in, bytes or JSON out. They do no I/O and never
see the network, so the relay's internals can change under them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel

from gateway.access.keys import ApiKey
from gateway.config import GatewayFile
from gateway.context import ChatRequest, RequestContext
from gateway.errors import GatewayError, error_body
from gateway.relay import Assembler
from gateway.schemas import AnthropicErrorResponse, ErrorResponse
from gateway.upstreams.assemble import CompletionAssembler

if TYPE_CHECKING:  # services imports the dispatcher, which imports the relay
    from gateway.services import Services


class StreamRenderer(Protocol):
    """Upstream chunk batches in, the client API's stream events out (bytes ready to send)."""

    def start(self) -> bytes: ...
    def feed(self, chunks: list[dict[str, Any]]) -> bytes: ...
    def finish(self) -> bytes: ...
    def fail(self, err: GatewayError) -> bytes: ...
    def result(self) -> dict[str, Any] | None: ...  # the finished object, as `render_json` would give


class ClientApi:
    """The chat completions adapter's behaviour is the default; other APIs override what differs."""

    name = "chat"
    error_shape = "openai"
    # The route and its OpenAPI description (app.py's route table reads these).
    path = "/v1/chat/completions"
    summary = ""
    request_schema: dict[str, Any] = {"type": "object", "properties": {}}
    request_example: dict[str, Any] = {}
    ok_response: dict[str, Any] = {"description": "The answer"}
    error_statuses: tuple[int, ...] = (400, 401, 403, 404, 413, 429, 499, 502, 503, 504)

    def parse(self, raw: bytes, headers: Mapping[str, str], request_id: str, limits: GatewayFile) -> ChatRequest:
        raise NotImplementedError

    async def recall(self, chat: ChatRequest, services: Services, client: ApiKey | None) -> ChatRequest:
        return chat

    def assembler(self, chat: ChatRequest) -> Assembler:
        return CompletionAssembler()

    def render_json(self, result: dict[str, Any], chat: ChatRequest) -> dict[str, Any]:
        return result

    def stream_renderer(self, chat: ChatRequest, model: str) -> StreamRenderer | None:
        return None

    def after(self, ctx: RequestContext, rendered: dict[str, Any], services: Services) -> None:
        """Called once the client has its answer (never for a failed one)."""

    def error_model(self) -> type[BaseModel]:
        """The OpenAPI model of this API's error bodies."""
        return AnthropicErrorResponse if self.error_shape == "anthropic" else ErrorResponse

    def error_body(self, err: GatewayError) -> bytes:
        return error_body(err, self.error_shape)


def sse_event(name: str, payload: bytes) -> bytes:
    """A named server-sent event: Responses and Messages streams name each event by its type."""
    return b"event: " + name.encode() + b"\ndata: " + payload + b"\n\n"


def answer_pieces(chunks: list[dict[str, Any]]) -> Iterator[tuple[str, Any]]:
    """What a batch of chat-completion chunks adds to the answer, in order, for the stream renderers:
    ("usage", dict), ("reasoning", str), ("text", str), ("tool_call", the chunk's call dict),
    ("finish", finish_reason). Only choice 0: the translated APIs have one answer per response."""
    for chunk in chunks:
        if chunk.get("usage"):
            yield "usage", chunk["usage"]
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if reasoning:
                yield "reasoning", reasoning
            if delta.get("content"):
                yield "text", delta["content"]
            for call in delta.get("tool_calls") or ():
                yield "tool_call", call
            if choice.get("finish_reason"):
                yield "finish", choice["finish_reason"]
