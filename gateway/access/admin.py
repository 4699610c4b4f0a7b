"""The admin API: create, list, show and revoke client keys, and read a key's spend.

    POST   /admin/keys                 -> 201 the key, with its secret (shown this once)
    GET    /admin/keys                 -> every key, revoked ones included
    GET    /admin/keys/{key_id}        -> one key
    POST   /admin/keys/{key_id}/revoke -> the key, revoked (kept, so its spend stays readable)
    GET    /admin/keys/{key_id}/spend  -> spend this period, against the budget
    POST   /admin/reload               -> re-read the catalogue and policies (as SIGHUP does); 400 with
                                          the file-and-key message if invalid (the old one keeps serving)

Every route wants `Authorization: Bearer <ULTRAROUTE_ADMIN_KEY>`; without that variable the API is
off (403). Bodies are read and validated here, so errors come back in OpenAI's shape like every
other error of the gateway. Keys are written to the store and put in this replica's key ring at
once; other replicas see them within `keys_refresh_s`, or at once when a client uses the new key.
"""

from __future__ import annotations

import hmac
import time
from typing import Annotated, Any

from fastapi import APIRouter, Request, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from gateway.access.keys import ApiKey, KeySpec
from gateway.access.manage import (
    KeyCreated,
    KeyList,
    KeyView,
    SpendView,
    create_key,
    revoke_key,
    spend_view,
    view,
)
from gateway.access.store import KeyStoreError
from gateway.config import Catalogue, ConfigError
from gateway.errors import (
    AuthenticationFailed,
    InvalidRequest,
    KeyNotFound,
    PermissionDenied,
    ServiceUnavailable,
)
from gateway.parse import invalid_fields, read_body
from gateway.policy import PolicySet
from gateway.schemas import error_responses
from gateway.services import Services

MAX_ADMIN_BODY = 64 * 1024
bearer = HTTPBearer(auto_error=False, scheme_name="bearer",
                    description="A client key for /v1; ULTRAROUTE_ADMIN_KEY for /admin.")


# The bearer credentials, declared so that the OpenAPI document shows the admin routes' security.
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


def _services(request: Request) -> Services:
    return request.app.state.services  # type: ignore[no-any-return]


def _check_admin(services: Services, credentials: HTTPAuthorizationCredentials | None) -> None:
    admin_key = services.config.admin_key
    if admin_key is None:
        raise PermissionDenied("The admin API is off: start the gateway with ULTRAROUTE_ADMIN_KEY set.",
                               code="admin_disabled")
    if credentials is None:
        raise AuthenticationFailed("Missing admin key: send `Authorization: Bearer <ULTRAROUTE_ADMIN_KEY>`.",
                                   code="missing_api_key")
    if not hmac.compare_digest(credentials.credentials.encode(), admin_key.get_secret_value().encode()):
        raise AuthenticationFailed("Incorrect admin key provided.")


async def _spec(request: Request) -> KeySpec:
    raw = await read_body(request, MAX_ADMIN_BODY)
    try:
        return KeySpec.model_validate_json(raw or b"null")
    except ValidationError as err:
        raise invalid_fields(err) from None


def _store_down(err: KeyStoreError) -> ServiceUnavailable:
    return ServiceUnavailable(f"The key store cannot be reached: {err}", code="key_store_unavailable")


def spec_schema(catalogue: Catalogue, policies: PolicySet) -> dict[str, Any]:
    """KeySpec's JSON schema, with this gateway's model and policy names as the allowed values."""
    schema = KeySpec.model_json_schema()
    names = sorted({*catalogue.models, *catalogue.aliases})
    properties = schema["properties"]
    properties["models"]["anyOf"][0]["items"] = {"type": "string", "enum": names}
    properties["policy"]["anyOf"][0]["enum"] = sorted(policies.policies)
    return schema


def spec_body(catalogue: Catalogue, policies: PolicySet) -> dict[str, Any]:
    """`POST /admin/keys`'s request body in the OpenAPI document."""
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": spec_schema(catalogue, policies)}}}}


def admin_router(catalogue: Catalogue, policies: PolicySet) -> APIRouter:
    router = APIRouter(prefix="/admin", tags=["admin"])
    auth_errors = error_responses(401, 403)

    @router.post("/keys", status_code=201, response_model=KeyCreated, openapi_extra=spec_body(catalogue, policies),
                 responses=error_responses(400, 401, 403, 413, 503))
    async def create(request: Request, credentials: Credentials) -> JSONResponse:
        services = _services(request)
        _check_admin(services, credentials)
        spec = await _spec(request)
        try:
            key, secret = await create_key(services.key_store, spec, services.config.catalogue,
                                           services.config.policies)
        except KeyStoreError as err:
            raise _store_down(err) from None
        if services.access.keyring is not None:
            services.access.keyring.put(key)
        body = KeyCreated(**view(key).model_dump(), key=secret)
        return JSONResponse(body.model_dump(mode="json"), status_code=201, headers={"cache-control": "no-store"})

    @router.get("/keys", response_model=KeyList, responses={**auth_errors, **error_responses(503)})
    async def list_keys(request: Request, credentials: Credentials) -> JSONResponse:
        services = _services(request)
        _check_admin(services, credentials)
        try:
            keys = await services.key_store.load()
        except KeyStoreError as err:
            raise _store_down(err) from None
        data = sorted((view(k) for k in keys.values()), key=lambda v: v.created_at)
        return JSONResponse(KeyList(data=data).model_dump(mode="json"))

    async def _find(services: Services, key_id: str) -> ApiKey:
        try:
            keys = await services.key_store.load()
        except KeyStoreError as err:
            raise _store_down(err) from None
        if key_id not in keys:
            raise KeyNotFound()
        return keys[key_id]

    @router.get("/keys/{key_id}", response_model=None, responses={
        200: {"model": KeyView}, **auth_errors, **error_responses(404, 503)})
    async def show(request: Request, key_id: str,
                   credentials: Credentials) -> JSONResponse:
        services = _services(request)
        _check_admin(services, credentials)
        return JSONResponse(view(await _find(services, key_id)).model_dump(mode="json"))

    @router.post("/keys/{key_id}/revoke", response_model=None, responses={
        200: {"model": KeyView}, **auth_errors, **error_responses(404, 503)})
    async def revoke(request: Request, key_id: str,
                     credentials: Credentials) -> JSONResponse:
        services = _services(request)
        _check_admin(services, credentials)
        try:
            key = await revoke_key(services.key_store, key_id)
        except KeyStoreError as err:
            raise _store_down(err) from None
        if services.access.keyring is not None:
            services.access.keyring.put(key)
        return JSONResponse(view(key).model_dump(mode="json"))

    @router.get("/keys/{key_id}/spend", response_model=SpendView,
                responses={**auth_errors, **error_responses(404, 503)})
    async def spend(request: Request, key_id: str,
                    credentials: Credentials) -> JSONResponse:
        services = _services(request)
        _check_admin(services, credentials)
        key = await _find(services, key_id)
        now = time.time()
        spent = await services.access.ledger.read_spend(key, now)
        return JSONResponse(spend_view(key, spent, now).model_dump(mode="json"))

    @router.post("/reload", responses={
        200: {"description": "The new configuration serves new requests; what changed"},
        **error_responses(400), **auth_errors})
    async def reload(request: Request, credentials: Credentials) -> JSONResponse:
        """Re-read the catalogue and policies, as SIGHUP does."""
        _check_admin(_services(request), credentials)
        try:
            done = await request.app.state.reloader.reload("POST /admin/reload")
        except ConfigError as err:
            raise InvalidRequest(str(err), code="invalid_configuration") from None
        return JSONResponse(done.to_json())

    return router
