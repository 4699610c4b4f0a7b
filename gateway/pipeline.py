"""The path of one request, stage by stage, whichever client API it came in by. Start reading here.

    0. admit      API key -> its record (401); model allowed (403); limits and budget (429)
                                                                      (access/gate.py)
    1. parse      the client API's request -> ChatRequest             (apis/: one adapter per API;
                  + recall: a stored conversation it continues        chat's is parse.py; sessions/)
    2. resolve    body > headers > model suffix > named policy > key's policy > default -> Preferences
    3. select     catalogue + live stats -> Plan: ordered candidates  (routing/)
    4. dispatch   walk the plan until one endpoint produces a token   (dispatch.py), each asked in
                  the API its provider speaks, its stream read as chat chunks  (upstreams/)
    5. relay      stream it to the client, or assemble the JSON       (relay.py), rendered in the
                  client API's shape: its JSON or its stream events   (apis/: render_json, stream_renderer)
                  -- or, same API in and out, the upstream's own events and
                  answer, passed through                              (upstreams/passthrough.py)
    6. record     timings, tokens and cost of every attempt; the key's usage and spend (record.py);
                  then the adapter's `after` (a Responses answer with `store: true` is stored)

`handle()` composes them; each stage is a plain function of typed, frozen values. Only the two ends
know the client API (`ClientApi`, apis/adapter.py): stages 2-4 and 6 see a `ChatRequest` and nothing
else. Errors from any stage are `GatewayError`s, rendered in one place (`app.py`) in the client
API's shape.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message, Receive, Scope, Send

from gateway.access.keys import ApiKey
from gateway.apis.adapter import ClientApi, StreamRenderer
from gateway.apis.chat import ChatApi
from gateway.attempt import outcome_of
from gateway.context import ChatRequest, RequestContext
from gateway.dispatch import Served
from gateway.errors import GatewayError
from gateway.explain import metadata_json
from gateway.metrics import count_fallback
from gateway.parse import header_map, read_body
from gateway.relay import ChunkBatches, collect, sse_body
from gateway.services import Services
from gateway.sse import encode_event
from gateway.telemetry.sample import Outcome
from gateway.upstream_stream import UpstreamStream
from gateway.upstreams.passthrough import NativeAnswer, PassThrough

CHAT = ChatApi()


def served_headers(ctx: RequestContext, served: Served) -> dict[str, str]:
    endpoint = served.stream.endpoint
    headers = {
        "x-request-id": ctx.request.request_id,
        "x-ultraroute-provider": endpoint.provider.name,
        "x-ultraroute-endpoint": endpoint.id,
        "x-ultraroute-tier": endpoint.tier.value,
        "x-ultraroute-attempts": str(len(served.attempts) + 1),
    }
    # Premium endpoints passed over by the plan (spills) or by health (skips), then the ones that failed.
    spills = [(s.endpoint_id, s.reason) for s in ctx.plan.spills] if ctx.plan else []
    skips = [(s.endpoint_id, s.reason) for s in served.skips]
    hops = spills + skips + [(a.endpoint_id, a.reason) for a in served.attempts]
    if hops:
        path = "->".join([*(h[0] for h in hops), endpoint.id])
        headers["x-ultraroute-fallback"] = f"{path} ({','.join(h[1] for h in hops)})"
    return headers


def finish(services: Services, ctx: RequestContext, served: Served, failure: GatewayError | None,
           cancelled: bool, final: bool = True) -> None:
    """Stage 6 for the attempt that served (and its access log line); failed attempts were recorded
    as they failed. The client's key is charged the tokens and cost of what it was served."""
    stream = served.stream
    if cancelled:
        outcome, status = Outcome.CANCELLED, 200
    elif failure is not None:
        outcome, status = outcome_of(failure), failure.status
    else:
        outcome, status = Outcome.OK, 200
    session_key = ctx.plan.session_key if ctx.plan else None
    tier, asked = stream.served_tier, stream.endpoint.service_tier
    if tier is not None:
        stream.meter.served_tier = tier  # priced at the tier that served
        if asked == "auto":
            asked = None  # OpenAI's "auto" leaves the tier to OpenAI: no tier was asked to compare with
        if asked is not None and tier != asked:
            services.metrics.served_tier_mismatch(stream.endpoint, asked, tier)
    sample = services.recorder.record(stream.endpoint, stream.meter, outcome, status, served.started_at,
                                      served.in_flight_at_start, session_key)
    if tier is not None and asked is not None:  # after record: a half-open request is judged here too
        services.health.served_tier(stream.endpoint, tier != asked)
    services.access.charge(ctx.client, sample.input_tokens + sample.output_tokens, sample.cost_usd)
    if final:  # one access-log line per request, for the attempt that ended it
        services.access_log.served(ctx.request.request_id, served, sample, status, failure,
                                   ctx.client.id if ctx.client is not None else None, stream.meter.usage_estimated,
                                   ctx.request.api)
        services.metrics.client_request(ctx.request.api, status)


class Serving:
    """The attempt serving a request now. A stream that breaks mid-way may be continued on another
    endpoint (`resume`); then the broken attempt is recorded as failed and the new one takes over."""

    def __init__(self, services: Services, ctx: RequestContext, served: Served) -> None:
        self.services = services
        self.ctx = ctx
        self.served = served
        self.recorded = False

    async def resume(self, broken: UpstreamStream, text: str) -> UpstreamStream | None:
        assert self.ctx.plan is not None
        # Continuing after a prefix is a chat-completions feature; a legacy completion cannot, nor can
        # a pass-through answer (the client has the upstream's own events).
        if (not self.ctx.preferences.mid_stream_recovery or self.ctx.request.upstream != "chat"
                or broken.native is not None):
            return None
        await broken.aclose()
        try:
            following = await self.services.dispatcher.resume(self.ctx.request, self.ctx.plan,
                                                              broken.endpoint, text)
        except GatewayError:
            return None  # the broken attempt ends the request; the final close records and logs it
        await self.close(broken.failure, cancelled=False, final=False)
        self.served = following
        self.recorded = False
        return following.stream

    async def close(self, failure: GatewayError | None, cancelled: bool, final: bool = True) -> None:
        """Stage 6 for the serving attempt, once. Closing the response drops the upstream connection,
        so the provider stops generating when the client has gone."""
        if self.recorded:
            return
        self.recorded = True
        await self.served.stream.aclose()
        finish(self.services, self.ctx, self.served, failure, cancelled, final)


async def _relay_stream(serving: Serving, trailer: bytes | None) -> AsyncIterator[bytes]:
    cancelled = True
    try:
        stream = serving.served.stream
        async for data in sse_body(stream, stream.endpoint.model, serving.ctx.request.include_usage, trailer,
                                   serving.resume):
            yield data
        cancelled = False
    finally:
        # Also when the client disconnects: Starlette cancels us.
        await serving.close(serving.served.stream.failure, cancelled)


async def _render_stream(serving: Serving, renderer: StreamRenderer, api: ClientApi) -> AsyncIterator[bytes]:
    """A client API's own stream events (Responses, Messages) from the upstream's chunks."""
    cancelled = True
    try:
        yield renderer.start()
        try:
            async for events in ChunkBatches(serving.served.stream, serving.resume):
                out = renderer.feed([chunk for _, chunk in events])
                if out:
                    yield out
        except GatewayError as err:
            yield renderer.fail(err)  # bytes have reached the client: end with the API's error event
            cancelled = False
            return
        yield renderer.finish()
        cancelled = False
    finally:
        await serving.close(serving.served.stream.failure, cancelled)
    result = renderer.result()
    if result is not None and serving.served.stream.failure is None:
        api.after(serving.ctx, result, serving.services)


async def _until_disconnect(receive: Callable[[], Awaitable[Message]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


# How long a request runs before a watcher starts listening for its client to hang up. Most requests
# end sooner, and a watcher task per request costs ~3% of a JSON request's CPU; one that hangs up
# earlier is still noticed, WATCH_AFTER_S after it began (its upstream runs that much longer).
WATCH_AFTER_S = 0.05


async def unless_disconnected(work: Coroutine[Any, Any, Response],
                              receive: Callable[[], Awaitable[Message]]) -> Response:
    """Run `work` in this task, abandoning it (and so its upstream request) when the client hangs up.

    `work` runs in the current task, not a new one, so dispatch starts (and counts itself in flight)
    before any other request is planned: a burst of requests sees each other's load."""
    task = asyncio.current_task()
    assert task is not None
    gone = False
    watcher: asyncio.Future[None] | None = None

    async def watch() -> None:
        nonlocal gone
        await _until_disconnect(receive)
        gone = True
        task.cancel()

    def start_watching() -> None:
        nonlocal watcher
        watcher = asyncio.ensure_future(watch())

    timer = asyncio.get_running_loop().call_later(WATCH_AFTER_S, start_watching)
    try:
        return await work
    except asyncio.CancelledError:
        if not gone:
            raise
        task.uncancel()
        return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
    finally:
        timer.cancel()
        if watcher is not None:
            watcher.cancel()


class EventStream(StreamingResponse):
    """A `StreamingResponse` whose body is sent from the request's own task, abandoned (and so its
    upstream closed) when the client hangs up: `unless_disconnected` watches for that, as it does
    before the response starts. Starlette's own way -- an anyio task group per response, since
    uvicorn speaks ASGI 2.3 -- cost ~8% of a stream's CPU."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def body() -> Response:
            await self.stream_response(send)
            return self

        await unless_disconnected(body(), receive)


class JsonAnswer(Response):
    """A JSON response that, once sent (or once sending failed), closes and records the attempt that
    served it: recording is not on the client's path to its answer."""

    def __init__(self, content: bytes, headers: dict[str, str], serving: Serving) -> None:
        super().__init__(content, media_type="application/json", headers=headers)
        self.serving = serving

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.serving.close(None, cancelled=False)


async def _answer_json(serving: Serving, api: ClientApi, headers: dict[str, str],
                       metadata: dict[str, Any] | None) -> JsonAnswer:
    """Stages 5-6 for a client that did not stream: the whole answer, assembled and rendered in the
    API's shape. Should that fail, the attempt is closed and recorded here; else the `JsonAnswer`
    closes it once it has been sent."""
    ctx = serving.ctx
    try:
        stream = serving.served.stream
        native = stream.native  # same API in and out: the upstream's own answer (upstreams/passthrough.py)
        assembler = api.assembler(ctx.request) if native is None else NativeAnswer(native)
        collected = await collect(stream, stream.endpoint.model, serving.resume, assembler)
        completion = api.render_json(collected, ctx.request) if native is None else collected
        served = serving.served.stream  # after a mid-stream continuation, not the stream it began on
        if served.served_tier is not None:
            headers["x-ultraroute-served-tier"] = served.served_tier
        completion["provider"] = served.endpoint.provider.name  # as OpenRouter reports it
        if metadata is not None:
            completion["ultraroute"] = {**metadata, "usage_estimated": served.meter.usage_estimated}
        api.after(ctx, completion, serving.services)
        return JsonAnswer(orjson.dumps(completion), headers, serving)
    except BaseException as exc:  # a failure, the client gone (cancelled), or a bug: closed as such
        await serving.close(exc if isinstance(exc, GatewayError) else None,
                            cancelled=isinstance(exc, asyncio.CancelledError))
        raise


async def _serve(ctx: RequestContext, services: Services, api: ClientApi) -> Response:
    """Stages 4-6: dispatch, then relay (streaming) or collect (JSON), in the client API's shape; both
    end by recording."""
    chat, plan = ctx.request, ctx.plan
    assert plan is not None
    served = await services.dispatcher.dispatch(chat, plan, ctx.preferences.hedge_after_ms)
    headers = served_headers(ctx, served)
    headers.update(ctx.limit_headers)
    count_fallback(services.metrics, plan, served)
    endpoint = served.stream.endpoint
    metadata = metadata_json(plan, served.attempts, endpoint.id) if chat.want_metadata else None
    serving = Serving(services, ctx, served)
    if chat.stream:
        renderer = api.stream_renderer(chat, endpoint.model)
        if renderer is not None and served.stream.native is not None:
            renderer = PassThrough(served.stream.native, renderer)  # the upstream's own events
        if renderer is not None:
            body = _render_stream(serving, renderer, api)
        else:
            trailer: Callable[[], bytes] | None = None
            if metadata is not None:
                def metadata_event() -> bytes:  # built at the end: whether usage was estimated is known only then
                    metadata["usage_estimated"] = serving.served.stream.meter.usage_estimated
                    return encode_event(orjson.dumps({"object": "chat.completion.chunk", "model": endpoint.model,
                                                      "choices": [], "ultraroute": metadata}))
                trailer = metadata_event
            body = _relay_stream(serving, trailer)
        return EventStream(body, media_type="text/event-stream", headers={**headers, "cache-control": "no-cache"})
    return await _answer_json(serving, api, headers, metadata)


def prepare(chat: ChatRequest, request: Request, headers: Mapping[str, str], services: Services,
            client: ApiKey | None, admit: bool = True) -> RequestContext:
    """Stages 2-3 (with the model check of stage 0) for a parsed request: resolve preferences, select;
    then, with `admit`, the key's limits and budget (stage 0's last check: a request refused for its
    model or its plan has not used any). Without `admit`, pure and no I/O: what `/v1/route` shows."""
    request.scope["state"]["model"] = chat.model  # for the access-log line, should the request fail
    services.access.authorize(client, chat)
    started = time.perf_counter()
    prefs = services.resolver(chat, headers, client.policy if client is not None else None)
    plan = services.router.plan(chat, prefs)
    services.metrics.route_selection(time.perf_counter() - started)
    limit_headers = tuple(services.access.admit(client).items()) if admit else ()
    return RequestContext(request=chat, client=client, preferences=prefs, plan=plan, limit_headers=limit_headers)


async def plan_request(request: Request, services: Services, request_id: str, api: ClientApi = CHAT,
                       admit: bool = True) -> RequestContext:
    """Authenticate, read the body, then stages 1-3 (see `prepare`): everything up to the plan, also
    for `/v1/route` (without `admit`). The key is checked before the body is read: a stranger's bytes
    are never parsed. `recall` is the one step that may wait on Redis, and only for a request that
    continues a stored conversation."""
    headers = header_map(request.scope["headers"])
    client = await services.access.authenticate(headers)
    raw = await read_body(request, services.config.gateway.max_body_bytes)
    chat = api.parse(raw, headers, request_id, services.config.gateway)
    chat = await api.recall(chat, services, client)
    return prepare(chat, request, headers, services, client, admit)


async def handle(request: Request, services: Services, request_id: str, api: ClientApi = CHAT) -> Response:
    """admit -> parse -> resolve -> select -> dispatch -> relay -> record, for a request of client API `api`."""
    ctx = await plan_request(request, services, request_id, api)
    # Until the response starts, this watcher notices a client that hangs up; once a stream has
    # started, `EventStream` does the same.
    return await unless_disconnected(_serve(ctx, services, api), request.receive)
