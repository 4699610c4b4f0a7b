"""`POST /v1/completions` (OpenAI's legacy text completions), forwarded as they are.

Routed like chat, but only to endpoints that serve the `completions` upstream API (the catalogue's
`apis`). Streams pass through as the relay passes chat chunks (model name rewritten); a JSON answer
is assembled from the same chunks as a `text_completion`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.apis.adapter import ClientApi
from gateway.config import GatewayFile
from gateway.context import ChatRequest
from gateway.errors import InvalidRequest
from gateway.parse import chat_request_from, check_headers, parse_json_body

# What `prompt_chars` accepts, for the OpenAPI document (embeddings' `input` is the same).
PROMPT_SCHEMA: dict[str, Any] = {"anyOf": [
    {"type": "string"}, {"type": "array", "minItems": 1, "items": {"type": "string"}},
    {"type": "array", "minItems": 1, "items": {"type": "integer"}},
    {"type": "array", "minItems": 1, "items": {"type": "array", "minItems": 1, "items": {"type": "integer"}}}]}


def _token(t: Any) -> bool:
    """A token id as JSON Schema's `integer` has it: 7 and 7.0 both (never a boolean)."""
    return type(t) is int or (type(t) is float and t.is_integer())


def prompt_chars(prompt: Any, param: str) -> int:
    """Characters of a `prompt` (or embeddings `input`): a string, strings, or token id arrays."""
    if isinstance(prompt, str):
        return len(prompt)
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, str) for p in prompt):
            return sum(len(p) for p in prompt)
        if all(_token(t) for t in prompt):
            return 4 * len(prompt)
        if all(isinstance(p, list) and p and all(_token(t) for t in p) for p in prompt):
            return 4 * sum(len(p) for p in prompt)
    raise InvalidRequest(f"'{param}' must be a string, an array of strings, or token arrays.", param=param)


def text_completion(completion: dict[str, Any]) -> dict[str, Any]:
    """A `text_completion` from an assembled `chat.completion` of legacy completion chunks."""
    out = {k: v for k, v in completion.items() if k != "choices"}
    out["object"] = "text_completion"
    out["choices"] = [{"index": c["index"], "text": c["message"].get("content") or "", "logprobs": None,
                       "finish_reason": c["finish_reason"]} for c in completion.get("choices") or ()]
    return out


class CompletionsApi(ClientApi):
    name = "completions"
    path = "/v1/completions"
    summary = "Completions (legacy)"
    request_schema: dict[str, Any] = {
        "type": "object", "required": ["model", "prompt"],
        "description": "OpenAI's legacy completion request; fields not listed pass through to the provider.",
        "properties": {
            "model": {"type": "string", "minLength": 1},
            "prompt": PROMPT_SCHEMA,
            "stream": {"type": ["boolean", "null"]},
            "max_tokens": {"type": ["integer", "null"], "minimum": 1},
        },
    }
    request_example: dict[str, Any] = {"prompt": "Say hello", "max_tokens": 16}
    ok_response: dict[str, Any] = {"content": {"application/json": {}, "text/event-stream": {}},
                                   "description": "The `text_completion`; with `stream: true`, its chunks"}

    def parse(self, raw: bytes, headers: Mapping[str, str], request_id: str, limits: GatewayFile) -> ChatRequest:
        check_headers(headers)
        body = parse_json_body(raw, limits)
        chars = prompt_chars(body.get("prompt"), "prompt")
        return chat_request_from(body, headers, request_id, limits, api=self.name, upstream="completions",
                                 prompt_chars=chars)

    def render_json(self, result: dict[str, Any], chat: ChatRequest) -> dict[str, Any]:
        return text_completion(result)
