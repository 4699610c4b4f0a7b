"""`POST /v1/embeddings`, forwarded as it is to endpoints that serve the `embeddings` upstream API.

Not streamed: the answer is one JSON object, read whole within the first-token budget, so only its
end-to-end latency is measured (no TTFT or decode rate). Failover works as for chat: a failing
endpoint is passed over before anything reaches the client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.adapter import ClientApi
from gateway.apis.completions import PROMPT_SCHEMA, prompt_chars
from gateway.config import GatewayFile
from gateway.context import ChatRequest
from gateway.errors import InvalidRequest
from gateway.parse import chat_request_from, check_headers, parse_json_body


class WholeAnswer:
    """The assembler of an answer that arrives as one JSON object (an `Assembler`)."""

    def __init__(self) -> None:
        self.body: dict[str, Any] = {}
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        self.body = chunk
        self.usage = chunk.get("usage")

    def result(self, model: str) -> dict[str, Any]:
        return {**self.body, "model": model, "usage": self.usage}


class EmbeddingsApi(ClientApi):
    name = "embeddings"
    path = "/v1/embeddings"
    summary = "Embeddings"
    request_schema: dict[str, Any] = {
        "type": "object", "required": ["model", "input"],
        "description": "OpenAI's embeddings request; fields not listed (encoding_format, dimensions, ...) pass "
                       "through to the provider.",
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "input": PROMPT_SCHEMA,
        },
    }
    request_example: dict[str, Any] = {"input": "Hello"}
    ok_response: dict[str, Any] = {"content": {"application/json": {}}, "description": "The embeddings"}

    def parse(self, raw: bytes, headers: Mapping[str, str], request_id: str, limits: GatewayFile) -> ChatRequest:
        check_headers(headers)
        body = parse_json_body(raw, limits)
        if body.get("stream"):
            raise InvalidRequest("Embeddings are not streamed: 'stream' must be false or absent.", param="stream")
        chars = prompt_chars(body.get("input"), "input")
        return chat_request_from(body, headers, request_id, limits, api=self.name, upstream="embeddings",
                                 prompt_chars=chars)

    def assembler(self, chat: ChatRequest) -> WholeAnswer:
        return WholeAnswer()
