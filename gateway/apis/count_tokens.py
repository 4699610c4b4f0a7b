"""`POST /v1/messages/count_tokens`: how many input tokens a Messages request would be, as Anthropic's
endpoint answers (`{"input_tokens": N}`; the anthropic SDK's `client.messages.count_tokens()`).

The answer is the gateway's estimate over system, messages and tools (~4 characters a token,
routing/filters.py `CHARS_PER_TOKEN`), the same figure a streamed answer's `message_start` carries
and an upstream that reports no usage is charged by. Same key check as `/v1/messages` (x-api-key or
bearer), and errors in Anthropic's shape. No upstream is called and the key's limits are not spent.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.apis.messages import MessagesApi
from gateway.context import ChatRequest
from gateway.errors import GatewayError
from gateway.parse import header_map, read_body
from gateway.schemas import error_responses
from gateway.services import Services
from gateway.upstreams.attempt import prompt_estimate

PATH = "/v1/messages/count_tokens"


def count_schema(api: MessagesApi) -> dict[str, Any]:
    """The Messages request, without max_tokens and stream."""
    schema = api.request_schema
    properties = {k: v for k, v in schema["properties"].items() if k not in ("max_tokens", "stream")}
    return {**schema, "required": ["model", "messages"], "properties": properties,
            "description": "A Messages request, counted (estimated) without being sent."}


async def input_tokens(chat: ChatRequest, services: Services) -> int:
    """The count for a request whose model exists (404 otherwise). The seam for upstreams that count
    for themselves: where the endpoint planned first speaks Anthropic's API natively, its own
    `/v1/messages/count_tokens` answer belongs here; every endpoint now speaks chat, so the estimate."""
    services.router.resolve_model(chat.model, "model")
    return prompt_estimate(chat)


def count_tokens_router(api: MessagesApi, openapi_extra: dict[str, Any]) -> APIRouter:
    """The route; `openapi_extra`: its request body and security in the OpenAPI document (app.py)."""
    router = APIRouter()

    @router.post(PATH, summary="Count a Messages request's input tokens (an estimate)", openapi_extra=openapi_extra,
                 responses={200: {"description": "`{\"input_tokens\": N}`"},
                            **error_responses(400, 401, 403, 404, 413, 503, model=api.error_model())})
    async def count_tokens(request: Request) -> Response:
        request.scope["state"]["api"] = api  # a crash is answered in Anthropic's shape
        services: Services = request.app.state.services
        try:
            headers = header_map(request.scope["headers"])
            client = await services.access.authenticate(headers)
            raw = await read_body(request, services.config.gateway.max_body_bytes)
            chat = api.count_tokens(raw, headers, request.scope["state"]["request_id"], services.config.gateway)
            services.access.authorize(client, chat)
            return JSONResponse({"input_tokens": await input_tokens(chat, services)})
        except GatewayError as err:  # not a completion: no access-log line, no request metrics
            return Response(api.error_body(err), status_code=err.status, media_type="application/json",
                            headers=err.headers())

    return router
