"""`GET` and `DELETE /v1/responses/{id}`: a stored Responses answer, read or deleted by the client
key that created it (404 for any other key, as for an unknown or expired id). In open mode there are
no keys: anyone who knows an id (96 random bits) can read or delete it."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from gateway.apis.responses import ResponsesApi
from gateway.schemas import error_responses
from gateway.services import Services

RESPONSES = ResponsesApi()


def stored_responses_router() -> APIRouter:
    router = APIRouter()
    errors = error_responses(401, 404, 503)

    @router.get("/v1/responses/{response_id}", responses=errors, summary="A stored response")
    async def get_response(request: Request, response_id: str) -> JSONResponse:
        request.scope["state"]["api"] = RESPONSES
        services: Services = request.app.state.services
        client = await services.access.authenticate(request.headers)
        stored = await services.sessions.load(response_id, client, "response_id")
        return JSONResponse(stored.response)

    @router.delete("/v1/responses/{response_id}", responses=errors, summary="Delete a stored response")
    async def delete_response(request: Request, response_id: str) -> JSONResponse:
        request.scope["state"]["api"] = RESPONSES
        services: Services = request.app.state.services
        client = await services.access.authenticate(request.headers)
        await services.sessions.delete(response_id, client)
        return JSONResponse({"id": response_id, "object": "response.deleted", "deleted": True})

    return router
