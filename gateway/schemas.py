"""The OpenAPI description of the gateway's JSON: what `/openapi.json` promises clients (and what
schemathesis checks the gateway against).

These models document the wire; they do not validate requests on the hot path (`parse.py` does,
with orjson). The completion request lists only the fields the gateway itself checks, and allows
every other field, which passes through to the provider untouched.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from gateway.parse import ROLES


class ErrorObject(BaseModel):
    message: str
    type: str
    code: str | None
    param: str | None


class ErrorResponse(BaseModel):
    """Every error the gateway sends has this shape, OpenAI's."""

    error: ErrorObject


_STATUS_TEXT = {
    400: "Invalid request: the message names the parameter",
    401: "Missing, unknown or revoked API key",
    403: "The key may not do this (model not allowed; admin API disabled)",
    404: "No such model, endpoint or key",
    413: "Request body over the limit",
    429: "Rate limit (retry-after) or budget spent (code budget_exceeded)",
    499: "The client closed the connection",
    500: "Internal error in the gateway",
    502: "Every candidate upstream failed, or one broke its stream",
    503: "A dependency (the key store) cannot be reached, or this replica is shutting down (retry-after)",
    504: "The upstream did not answer in time",
}


class AnthropicErrorObject(BaseModel):
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    """Errors of `/v1/messages` have Anthropic's shape."""

    type: str
    error: AnthropicErrorObject


def error_responses(*statuses: int, model: type[BaseModel] = ErrorResponse) -> dict[int | str, dict[str, Any]]:
    return {s: {"model": model, "description": _STATUS_TEXT[s]} for s in statuses}


# Written out rather than generated: the OpenAPI document needs it without shared definitions.
CHAT_REQUEST_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "OpenAI's chat completion request. Fields not listed pass through to the provider; the "
                   "gateway's own (`provider`, `speed`, `models`, `session_id`) are described in the README.",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string", "minLength": 1},
        "messages": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["role"], "properties": {"role": {"type": "string", "enum": list(ROLES)}}}},
        # null means "not set", as in OpenAI's own schema.
        "stream": {"type": ["boolean", "null"]},
        "max_tokens": {"type": ["integer", "null"], "minimum": 1},
        "max_completion_tokens": {"type": ["integer", "null"], "minimum": 1},
        "n": {"type": ["integer", "null"], "minimum": 1},
    },
}


class ChatCompletion(BaseModel):
    """A non-streaming answer (a streaming one is `text/event-stream` of chunks)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: str
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, Any] | None = None
