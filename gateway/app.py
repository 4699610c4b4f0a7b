"""`create_app(config)`: the HTTP surface of the gateway, and the one place errors are rendered.

Routes are thin: each client API's route (`gateway/apis/`: `/v1/chat/completions`, `/v1/responses`,
`/v1/messages`, `/v1/completions`, `/v1/embeddings`) hands over to `pipeline.handle()` with its adapter,
and errors on those routes are rendered in that API's shape (`/v1/messages/count_tokens` too,
apis/count_tokens.py, which calls no upstream); `GET /v1/responses` upgraded to a WebSocket is
`apis/responses_ws.py`'s (many responses per connection); the rest read the catalogue,
the telemetry view, the Prometheus registry (`/metrics`) or serve the live page (`/dashboard`). Every
response carries `x-request-id` (the client's, if it sent a sane one). `app.state.services` holds the
current services (a reload replaces it; `serve/reload.py`), `app.state.drain` the shutdown switch
(`serve/drain.py`): `/healthz` is readiness (503 while warming up, health/warm_up.py, and while
draining), `/livez` liveness.

The client API routes are served as plain ASGI handlers (`GatewayApp.fast_routes`), before FastAPI's
middleware, exception and routing layers: those cost ~25% of the gateway's CPU per completion under
load. FastAPI still declares the routes (so `/openapi.json` documents them) and serves every other
route; the handlers keep the layers' semantics: the request id, errors rendered by the same
functions (in the API's shape) with the same access-log line and metrics, and the drain gate (`serve/drain.py`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway import pipeline
from gateway.access.admin import admin_router, spec_body
from gateway.apis import CLIENT_APIS, stored_responses_router
from gateway.apis.adapter import ClientApi
from gateway.apis.count_tokens import PATH as COUNT_PATH
from gateway.apis.count_tokens import count_schema, count_tokens_router
from gateway.apis.messages import MessagesApi
from gateway.apis.responses_ws import responses_socket
from gateway.apis.stored import RESPONSES
from gateway.config import Config
from gateway.dashboard import MEDIA_TYPE as DASHBOARD_MEDIA_TYPE
from gateway.dashboard import load_page
from gateway.errors import (
    ClientClosed,
    GatewayError,
    InvalidRequest,
    Overloaded,
    error_body,
)
from gateway.explain import plan_json
from gateway.observability.endpoint_view import endpoint_json, history_json
from gateway.observability.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from gateway.parse import MAX_MODEL_NAME
from gateway.schemas import error_responses
from gateway.serve.drain import Drain, DrainGate
from gateway.serve.overload import Admission
from gateway.serve.reload import Reloader
from gateway.serve.request_id import RequestIdMiddleware, assign_request_id
from gateway.services import Services, open_services
from gateway.upstreams.client import TransportFactory

log = logging.getLogger("ultraroute")
WINDOWS_S = (60, 300, 1800)
# A query parameter as the OpenAPI document shows it; `window_of()` holds the gateway to it.
WindowS = Annotated[int, Query(json_schema_extra={"enum": list(WINDOWS_S)},
                               description="Seconds of history: one of the windows the gateway keeps")]


class GatewayApp(FastAPI):
    """FastAPI, with the hot routes answered first by plain ASGI handlers (`fast_routes`, by method
    and exact path; `socket_routes`, WebSocket upgrades by path); every other request goes through
    FastAPI as usual."""

    fast_routes: dict[tuple[str, str], ASGIApp]
    socket_routes: dict[str, ASGIApp]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            handler = self.fast_routes.get((scope["method"], scope["path"]))
            if handler is not None:
                scope["app"] = self
                await handler(scope, receive, send)
                return
        elif scope["type"] == "websocket":
            socket = self.socket_routes.get(scope["path"])
            if socket is not None:
                await socket(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


CHAT = next(api for api in CLIENT_APIS if api.path == "/v1/chat/completions")  # `/v1/route` takes its body
MESSAGES = next(api for api in CLIENT_APIS if isinstance(api, MessagesApi))  # and count_tokens its own


def api_openapi(api: ClientApi, config: Config, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """A client API route's request body (`schema`: another than the API's own) and security in the
    OpenAPI document, with this catalogue's model names as examples."""
    models = list(config.catalogue.models)
    schema = schema or api.request_schema
    schema = {**schema, "properties": {**schema["properties"],
                                       "model": {"type": "string", "minLength": 1, "maxLength": MAX_MODEL_NAME,
                                                 "examples": models}}}
    example = {**api.request_example, "model": models[0] if models else "model"}
    security: list[dict[str, list[str]]] = [{"bearer": []}]
    if api.error_shape == "anthropic":
        security.append({"x-api-key": []})
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema, "example": example}}},
            "security": security}


def _text(media_type: str, description: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description, "content": {media_type: {"schema": {"type": "string"}}}}}


def window_of(window_s: int) -> int:
    if window_s not in WINDOWS_S:
        raise InvalidRequest(f"'window_s' must be one of {', '.join(map(str, WINDOWS_S))}.", param="window_s")
    return window_s


def render_error(err: GatewayError, api: ClientApi | None = None) -> Response:
    body = api.error_body(err) if api is not None else error_body(err)
    return Response(body, status_code=err.status, media_type="application/json", headers=err.headers())


def _api_of(request: Request) -> ClientApi | None:
    """The client API of the request being answered, when it came in by one of their routes."""
    return request.scope.get("state", {}).get("api")  # type: ignore[no-any-return]


def completion_failed(services: Services, request_id: str, err: GatewayError, api: ClientApi,
                      model: str | None = None) -> Response:
    """A client API request that ends in an error: its access-log line (naming the model asked for,
    once the body was parsed), the request and rejection metrics (upstream failures are counted per
    attempt), and the error response in the API's shape."""
    pipeline.count_failure(services, request_id, err, api.name, model)
    return render_error(err, api)


def completion_crashed(services: Services | None, request_id: str | None, api: ClientApi | None,
                       model: str | None = None) -> Response:
    """A bug: logged with its traceback, answered with a plain 500 (and an access-log line)."""
    log.exception("unhandled error in request %s", request_id)
    err = GatewayError("Internal error in the gateway.")
    if services is not None and api is not None:
        services.access_log.failed(str(request_id), err, model, api.name)
    return render_error(err, api)


def create_app(config: Config, *, transport_factory: TransportFactory | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_services(config, transport_factory) as services:
            app.state.services = services
            reloader = app.state.reloader = Reloader(app.state, drain, on_reload=forget_openapi)
            missing = [p.name for p in config.catalogue.providers.values() if p.key_missing]
            if missing:
                log.warning("providers without a key (their endpoints are unavailable): %s",
                            ", ".join(sorted(missing)))
            if config.open_access:
                log.warning("OPEN MODE: no client keys are checked; anyone who can reach this port can spend "
                            "on the providers' accounts. Create keys with `ultraroute keys create` and start "
                            "without --open / ULTRAROUTE_OPEN.")
            try:
                yield
            finally:
                await reloader.aclose()
                await app.state.services.upstreams.aclose()  # a reload's new pools (closing twice is safe)

    app = GatewayApp(title="Ultraroute", version="0.1.0", lifespan=lifespan, docs_url=None, redoc_url=None)
    dashboard_page = load_page()

    apis_by_path = {api.path: api for api in CLIENT_APIS}

    async def refuse_overloaded(scope: Scope, receive: Receive, send: Send) -> None:
        """Past `max_in_flight`: 503 at once, counted, logged; no upstream is called or blamed."""
        overloaded = Overloaded(config.gateway.max_in_flight)
        request_id = scope.get("state", {}).get("request_id")
        if request_id is None:  # the fast completion route: refused before its handler ran
            request_id, send = assign_request_id(scope, send)
        services: Services = app.state.services
        api = apis_by_path.get(scope["path"])  # refused in its own API's shape and counted under its name
        api_name = api.name if api is not None else "chat"
        services.metrics.overloaded(api_name)
        services.access_log.failed(request_id, overloaded, api=api_name)
        await render_error(overloaded, api)(scope, receive, send)

    # One count for the fast completion route and FastAPI's other client API routes.
    admission = Admission(config.gateway.max_in_flight, refuse_overloaded)
    app.add_middleware(admission.guard)  # type: ignore[arg-type]
    drain = app.state.drain = Drain()
    app.add_middleware(DrainGate, drain=drain)  # before admission: a draining replica refuses first
    app.add_middleware(RequestIdMiddleware)  # outermost: the refusal carries x-request-id too

    def services_of(request: Request) -> Services:
        return request.app.state.services  # type: ignore[no-any-return]

    def openapi() -> dict[str, Any]:
        """The document for the configuration serving now: model and policy names are part of it."""
        if app.openapi_schema is None:
            services = getattr(app.state, "services", None)
            current = services.config if services is not None else config
            paths = FastAPI.openapi(app)["paths"]
            for api in CLIENT_APIS:
                paths[api.path]["post"]["requestBody"] = api_openapi(api, current)["requestBody"]
            paths["/v1/route"]["post"]["requestBody"] = api_openapi(CHAT, current)["requestBody"]
            paths[COUNT_PATH]["post"]["requestBody"] = api_openapi(MESSAGES, current,
                                                                   count_schema(MESSAGES))["requestBody"]
            paths["/admin/keys"]["post"]["requestBody"] = spec_body(current.catalogue, current.policies)["requestBody"]
        return app.openapi_schema  # type: ignore[return-value]

    def forget_openapi() -> None:
        app.openapi_schema = None

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(GatewayError)
    async def _gateway_error(request: Request, exc: GatewayError) -> Response:
        api = _api_of(request)
        if api is not None and request.method == "POST":
            state = request.scope["state"]
            return completion_failed(services_of(request), state["request_id"], exc, api, state.get("model"))
        return render_error(exc, api)

    @app.exception_handler(ClientDisconnect)
    async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
        # Starlette's own body reading (the admin routes): a hang-up, as on the client API routes.
        return await _gateway_error(request, ClientClosed())

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
        err = GatewayError(str(exc.detail), code="not_found" if exc.status_code == 404 else None)
        err.status = exc.status_code
        err.type = "invalid_request_error"
        response = render_error(err)
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:  # Starlette names the methods of one route; the path may have several
            methods = {m for r in request.app.routes if isinstance(r, APIRoute) and r.path_regex.match(request.url.path)
                       for m in r.methods}
            response.headers["allow"] = ", ".join(sorted(methods))
        return response

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0]
        path = ".".join(str(p) for p in first["loc"][1:]) or None
        return render_error(InvalidRequest(f"'{path}': {first['msg']}.", param=path))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> Response:
        api = _api_of(request)
        state = request.scope.get("state", {})
        return completion_crashed(services_of(request) if api is not None else None, state.get("request_id"), api,
                                  state.get("model"))

    app.include_router(admin_router(config.catalogue, config.policies))

    # The route table of the client APIs: one POST route per adapter (gateway/apis/). FastAPI documents
    # them; requests are answered by the plain ASGI handlers below (`fast_routes`), before FastAPI.
    for api in CLIENT_APIS:
        app.add_api_route(api.path, _client_route(api), methods=["POST"], response_model=None,
                          summary=api.summary, openapi_extra=api_openapi(api, config),
                          responses={200: api.ok_response,
                                     **error_responses(*api.error_statuses, model=api.error_model())})
    app.include_router(stored_responses_router())
    app.include_router(count_tokens_router(MESSAGES, api_openapi(MESSAGES, config, count_schema(MESSAGES))))

    def fast_route(api: ClientApi) -> ASGIApp:
        async def handler(scope: Scope, receive: Receive, send: Send) -> None:
            _, send = assign_request_id(scope, send)
            scope["state"]["api"] = api
            await gate(scope, receive, send)  # refused while draining; counted in flight

        async def answer(scope: Scope, receive: Receive, send: Send) -> None:
            request_id = scope["state"]["request_id"]
            services: Services = app.state.services
            try:
                response = await pipeline.handle(Request(scope, receive), services, request_id, api)
            except GatewayError as exc:
                response = completion_failed(services, request_id, exc, api, scope["state"].get("model"))
            except Exception:
                response = completion_crashed(services, request_id, api, scope["state"].get("model"))
            await response(scope, receive, send)

        gate = DrainGate(answer, drain)
        return handler

    app.fast_routes = {("POST", api.path): admission.guard(fast_route(api)) for api in CLIENT_APIS}
    # The Responses WebSocket (apis/responses_ws.py): each response on it is admitted, drained, routed
    # and recorded as a POST would be.
    app.socket_routes = {RESPONSES.path: responses_socket(RESPONSES, app.state, drain, admission)}

    @app.post("/v1/route", openapi_extra=api_openapi(CHAT, config),
              responses=error_responses(400, 401, 403, 404, 413, 503))
    async def route(request: Request) -> JSONResponse:
        """The plan for a completion body, without calling any upstream: ranked candidates with the
        figures behind them, and every excluded endpoint with the reason."""
        ctx = await pipeline.plan_request(request, services_of(request), request.scope["state"]["request_id"],
                                           admit=False)
        assert ctx.plan is not None
        plan = plan_json(ctx.plan)
        health = services_of(request).health  # candidates health keeps out now (dispatch skips them), and why
        plan["demoted"] = [{"endpoint": c.endpoint.id, "reason": reason} for c in ctx.plan.candidates
                           if (reason := health.reason(c.endpoint.key)) is not None]
        return JSONResponse(plan)

    @app.get("/v1/models", responses=error_responses(401, 503))
    async def models(request: Request) -> JSONResponse:
        """The models this key may use (every model in open mode)."""
        services = services_of(request)
        client = await services.access.authenticate(request.headers)
        catalogue = services.config.catalogue
        allowed = None if client is None or client.models is None else services.access.allowed_models(client)
        data = [
            {"id": name, "object": "model", "created": 0, "owned_by": "ultraroute",
             "aliases": [a for a, m in catalogue.aliases.items() if m == name],
             "endpoints": [e.id for e in endpoints]}
            for name, endpoints in catalogue.models.items() if allowed is None or name in allowed
        ]
        return JSONResponse({"object": "list", "data": data})

    @app.get("/v1/endpoints", responses=error_responses(400))
    async def endpoints(request: Request, window_s: WindowS = 300) -> JSONResponse:
        """Every endpoint of every model: catalogue facts and live stats over the last `window_s`."""
        window_s = window_of(window_s)
        services = services_of(request)
        telemetry, shaper = services.telemetry, services.dispatcher.shaper
        data = [endpoint_json(e, telemetry.stats(e.key, window_s),
                              None if shaper is None else shaper.view(e.provider.name))
                for e in services.config.catalogue.endpoints()]
        return JSONResponse({"object": "list", "data": data})

    @app.get("/v1/endpoints/history", responses=error_responses(400))
    async def endpoints_history(request: Request, window_s: WindowS = 1800) -> JSONResponse:
        """Every endpoint's time series over the last `window_s`, one point per telemetry bucket
        (`bucket_s`, 10 s) that has data, oldest first: requests, endpoint errors, output tokens and
        the medians of TTFT, decode rate and end-to-end latency. What the live page draws on open."""
        window_s = window_of(window_s)
        services = services_of(request)
        telemetry = services.telemetry
        data = [history_json(e, telemetry.series(e.key, window_s)) for e in services.config.catalogue.endpoints()]
        return JSONResponse({"object": "list", "window_s": window_s, "bucket_s": telemetry.bucket_s, "data": data})

    @app.get("/metrics", response_class=PlainTextResponse,
             responses=_text("text/plain", "Prometheus text exposition format"))
    async def metrics(request: Request) -> Response:
        return Response(services_of(request).metrics.exposition(), media_type=METRICS_CONTENT_TYPE)

    @app.get("/dashboard", response_class=HTMLResponse, responses=_text("text/html", "The live page"))
    async def dashboard() -> Response:
        return Response(dashboard_page, media_type=DASHBOARD_MEDIA_TYPE, headers={"cache-control": "no-cache"})

    @app.get("/healthz", responses={503: {"description": "Warming up (`health.warm_up`), or draining after "
                                                       "SIGTERM: send no requests now"}})
    async def healthz(request: Request) -> JSONResponse:
        """Readiness, and which replica answered (`serve --workers N`: which worker): 200 while it takes
        requests; 503 while it measures its endpoints at start (health/warm_up.py) and from SIGTERM on."""
        services = services_of(request)
        status = "draining" if drain.draining else \
            "warming_up" if services.warm_up is not None and not services.warm_up.done else "ok"
        if status != "ok":
            return JSONResponse({"status": status, "replica": services.replica_id}, status_code=503,
                                headers={"retry-after": "1"})
        return JSONResponse({"status": "ok", "replica": services.replica_id})

    @app.get("/livez")
    async def livez() -> JSONResponse:
        """Liveness: 200 while the process serves HTTP, draining included (do not restart it then)."""
        return JSONResponse({"status": "ok"})

    return app


def _client_route(api: ClientApi) -> Any:
    async def route(request: Request) -> Response:
        request.scope["state"]["api"] = api  # errors from here on are rendered in this API's shape
        services: Services = request.app.state.services
        return await pipeline.handle(request, services, request.scope["state"]["request_id"], api)

    route.__name__ = f"{api.name}_route"
    return route
