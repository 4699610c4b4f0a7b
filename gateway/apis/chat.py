"""`POST /v1/chat/completions`: the gateway's own shape, so the adapter only parses (`parse.py`).

Answers are what the relay makes: its SSE pass-through of the upstream chunks, or the assembled
`chat.completion`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.adapter import ClientApi
from gateway.config import GatewayFile
from gateway.context import ChatRequest
from gateway.parse import parse_chat_request
from gateway.schemas import CHAT_REQUEST_SCHEMA, ChatCompletion


class ChatApi(ClientApi):
    name = "chat"
    path = "/v1/chat/completions"
    summary = "Chat Completions"
    request_schema = CHAT_REQUEST_SCHEMA
    request_example: dict[str, Any] = {"max_tokens": 16, "messages": [{"role": "user", "content": "Hello"}]}
    ok_response: dict[str, Any] = {"model": ChatCompletion, "content": {"text/event-stream": {}},
                                   "description": "The completion; with `stream: true`, server-sent chunks"}

    def parse(self, raw: bytes, headers: Mapping[str, str], request_id: str, limits: GatewayFile) -> ChatRequest:
        return parse_chat_request(raw, headers, request_id, limits)
