"""The path of one request, stage by stage, whichever client API it came in by. Start reading here.

    0. admit      API key -> its record (401); model allowed (403); limits and budget (429)
                                                                      (access/gate.py)
    1. parse      the client API's request -> ChatRequest             (apis/: one adapter per API;
                  + recall: a stored conversation it continues        chat's is parse.py; sessions/)
    2. resolve    body > headers > model suffix > named policy > key's policy > default -> Preferences
    3. select     catalogue + live stats -> Plan: ordered candidates  (routing/)
    4. dispatch   walk the plan until one endpoint produces a token   (dispatch.py), past any whose
                  circuit is open (health/board.py); each attempt (upstreams/attempt.py) asks in the
                  API its provider speaks, its stream read as chat chunks  (upstreams/)
    5. relay      stream it to the client, or assemble the JSON       (relay.py, upstreams/assemble.py),
                  rendered in the client API's shape: its JSON or its stream events
                                                                      (apis/: render_json, stream_renderer)
                  -- or, same API in and out, the upstream's own events and
                  answer, passed through                              (upstreams/passthrough.py)
    6. record     timings, tokens and cost of every attempt; the key's usage and spend (record.py);
                  metrics and the access log (observability/); then the adapter's `after` (a
                  Responses answer with `store: true` is stored)

`handle()` composes them for an HTTP request; `serve_events()` runs stages 4-6 for a response that
goes out another way (the Responses WebSocket, apis/responses_ws.py, which plans it with `prepare`).
Each stage is a plain function of typed, frozen values. Only the two ends
know the client API (`ClientApi`, apis/adapter.py): stages 2-4 and 6 see a `ChatRequest` and nothing
else. Errors from any stage are `GatewayError`s, rendered in one place (`app.py`) in the client
API's shape.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import replace
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from gateway.access.keys import ApiKey
from gateway.apis.adapter import ClientApi, StreamRenderer
from gateway.apis.chat import ChatApi
from gateway.context import Attempt, ChatRequest, RequestContext
from gateway.dispatch import Served
from gateway.errors import AllCandidatesFailed, GatewayError, UpstreamError
from gateway.explain import metadata_json
from gateway.observability.metrics import count_fallback
from gateway.parse import header_map, read_body
from gateway.relay import ChunkBatches, Ended, collect, sse_body
from gateway.serve.respond import EventStream, JsonAnswer, unless_disconnected
from gateway.services import Services
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.upstreams.attempt import dropped_for, outcome_of
from gateway.upstreams.passthrough import NativeAnswer, PassThrough
from gateway.upstreams.sse import encode_event
from gateway.upstreams.stream import UpstreamStream

CHAT = ChatApi()


def count_failure(services: Services, request_id: str, err: GatewayError, api: str, model: str | None = None,
                  transport: str = "http") -> None:
    """Stage 6 for a request no endpoint served (refused, or every candidate failed): its access-log
    line (naming the model asked for, once the body was parsed), the request and rejection metrics
    (upstream failures were counted per attempt)."""
    services.access_log.failed(request_id, err, model, api, transport)
    services.metrics.client_request(api, err.status)
    if not isinstance(err, UpstreamError | AllCandidatesFailed):
        services.metrics.rejected(err.metric_label, api)


def served_headers(ctx: RequestContext, served: Served) -> dict[str, str]:
    endpoint = served.stream.endpoint
    headers = {
        "x-request-id": ctx.request.request_id,
        "x-ultraroute-provider": endpoint.provider.name,
        "x-ultraroute-endpoint": endpoint.id,
        "x-ultraroute-tier": str(endpoint.tier),  # a StrEnum's str() is its value, without Enum's property
        "x-ultraroute-attempts": str(len(served.attempts) + 1),
    }
    # Premium endpoints passed over by the plan (spills) or by health (skips), then the ones that failed
    # (on the way to a stream's first byte: nothing built for the common request that had none).
    spills = ctx.plan.spills if ctx.plan else ()
    if spills or served.skips or served.attempts:
        hops = [(s.endpoint_id, s.reason) for s in spills] + [(s.endpoint_id, s.reason) for s in served.skips] \
            + [(a.endpoint_id, a.reason) for a in served.attempts]
        path = "->".join([*(h[0] for h in hops), endpoint.id])
        headers["x-ultraroute-fallback"] = f"{path} ({','.join(h[1] for h in hops)})"
    dropped = dropped_for(ctx.request_for(endpoint), endpoint)
    if dropped:
        headers["x-ultraroute-dropped"] = dropped_header(dropped)
    return headers


# Clients read response headers under a size cap (h11's is 16 KiB for the whole head); the access log
# has the full list.
MAX_DROPPED_HEADER = 1024


def dropped_header(names: tuple[str, ...]) -> str:
    """`x-ultraroute-dropped`: the names as printable ASCII (a field name is the client's own JSON key,
    any text: escaped, so it can neither break the header nor add one), within MAX_DROPPED_HEADER."""
    shown: list[str] = []
    size = 0
    for i, name in enumerate(names):
        safe = name if name.isascii() and name.isprintable() else name.encode("unicode_escape").decode("ascii")
        size += len(safe) + 2
        if size > MAX_DROPPED_HEADER:
            shown.append(f"... ({len(names) - i} more)")
            break
        shown.append(safe)
    return ", ".join(shown)


def finish(services: Services, ctx: RequestContext, served: Served, failure: GatewayError | None,
           cancelled: bool, final: bool = True, earlier: Sequence[tuple[str, AttemptSample]] = (),
           broke: GatewayError | None = None) -> AttemptSample:
    """Stage 6 for the attempt that served (and its access log line); failed attempts were recorded
    as they failed. The client's key is charged the tokens and cost of what it was served. `earlier`:
    the attempts whose streams broke before this one continued them (recorded and charged then: the
    log line names them and their costs); `broke`: this attempt's stream broke, but the answer was
    whole (nothing left of max_tokens), so the request ended well."""
    stream = served.stream
    if cancelled:
        outcome, status = Outcome.CANCELLED, 200
    elif failure is not None:
        outcome, status = outcome_of(failure), failure.status
    else:
        outcome, status = (Outcome.OK if broke is None else outcome_of(broke)), 200
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
                                   ctx.request.api, earlier, dropped_for(ctx.request_for(stream.endpoint),
                                                                         stream.endpoint),
                                   ctx.transport)
        services.metrics.client_request(ctx.request.api, status)
    return sample


def completion_limit(body: Mapping[str, Any]) -> int | None:
    """The request's `max_tokens` (or `max_completion_tokens`; the smaller when both are set)."""
    limits = [v for v in (body.get("max_tokens"), body.get("max_completion_tokens")) if isinstance(v, int)]
    return min(limits) if limits else None


class Serving:
    """The attempt serving a request now. A stream that breaks mid-way may be continued on another
    endpoint (`resume`), asked for what is left of `max_tokens`; then the broken attempt is recorded
    as failed and charged, and the new one takes over. The path (`earlier`, and the served attempt's
    `attempts`) shows in the access log line and, for a JSON answer, in the response headers."""

    def __init__(self, services: Services, ctx: RequestContext, served: Served) -> None:
        self.services = services
        self.ctx = ctx
        self.served = served
        self.recorded = False
        self.earlier: list[tuple[str, AttemptSample]] = []  # broken attempts (endpoint id, sample) continued since
        self.broke: GatewayError | None = None  # the serving stream broke when the answer was whole

    async def resume(self, broken: UpstreamStream, text: str, delivered: int) -> UpstreamStream | Ended | None:
        """Continue after `text` (`delivered` tokens so far, of every stream), or end the answer when
        nothing is left of max_tokens; None when it cannot be continued (the request ends in error)."""
        assert self.ctx.plan is not None
        # Continuing after a prefix is a chat-completions feature; a legacy completion cannot, nor can
        # a pass-through answer (the client has the upstream's own events).
        if (not self.ctx.preferences.mid_stream_recovery or self.ctx.request.upstream != "chat"
                or broken.native is not None):
            return None
        await broken.aclose()
        limit = completion_limit(self.ctx.request_for(broken.endpoint).body)
        left = None if limit is None else limit - delivered
        if left is not None and left <= 0:
            # The client has every token it asked for: no continuation could add one.
            self.broke, broken.failure = broken.failure, None
            return Ended("length")
        try:
            following = await self.services.dispatcher.resume(self.ctx.request, self.ctx.plan,
                                                              broken.endpoint, text, left)
        except GatewayError:
            return None  # the broken attempt ends the request; the final close records and logs it
        failure = broken.failure
        assert failure is not None
        endpoint = broken.endpoint
        sample = await self.close(failure, cancelled=False, final=False)
        assert sample is not None
        self.earlier.append((endpoint.id, sample))
        hop = Attempt(endpoint.key, endpoint.id, endpoint.tier.value, outcome_of(failure), failure.status,
                      failure.metric_label, time.perf_counter() - broken.meter.t_sent)
        self.served = replace(following, attempts=(*self.served.attempts, hop, *following.attempts),
                              skips=(*self.served.skips, *following.skips))
        self.recorded = False
        return following.stream

    async def close(self, failure: GatewayError | None, cancelled: bool, final: bool = True) -> AttemptSample | None:
        """Stage 6 for the serving attempt, once. Closing the response drops the upstream connection,
        so the provider stops generating when the client has gone."""
        if self.recorded:
            return None
        self.recorded = True
        await self.served.stream.aclose()
        return finish(self.services, self.ctx, self.served, failure, cancelled, final, self.earlier, self.broke)


def estimated_usage(stream: UpstreamStream, batches: ChunkBatches) -> list[dict[str, Any]]:
    """The usage chunk the upstream did not send, for a stream renderer: the estimate the key is
    charged (`Meter.settle_usage`), so that every API's last event carries the usage billed, as chat's
    relay does; after a mid-stream continuation, of every stream the client received. Nothing when the
    upstream sent its own usage."""
    stream.meter.settle_usage()  # at the end already; a broken stream is settled here, before its last event
    if not stream.meter.usage_estimated:
        return []
    return [{"choices": [], "usage": batches.client_usage(stream.meter.usage)}]


async def _render_stream(serving: Serving, renderer: StreamRenderer, api: ClientApi) -> AsyncIterator[bytes]:
    """A client API's own stream events (Responses, Messages) from the upstream's chunks."""
    cancelled = True
    try:
        yield renderer.start()
        batches = ChunkBatches(serving.served.stream, serving.resume)
        try:
            async for events in batches:
                out = renderer.feed([chunk for _, chunk in events])
                if out:
                    yield out
        except GatewayError as err:
            # (A pass-through renderer hands on what its upstream sent since the last batch here.)
            tail = renderer.feed(estimated_usage(serving.served.stream, batches))
            yield tail + renderer.fail(err)  # bytes have reached the client: end with the API's error event
            cancelled = False
            return
        tail = renderer.feed(estimated_usage(serving.served.stream, batches))
        yield tail + renderer.finish()
        cancelled = False
    finally:
        await serving.close(serving.served.stream.failure, cancelled)
    result = renderer.result()
    if result is not None and serving.served.stream.failure is None:
        api.after(serving.ctx, result, serving.services)


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
        if serving.earlier:  # continued after a break: the headers name the path it took
            headers = {**headers, **served_headers(ctx, serving.served)}
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

            def close(cancelled: bool) -> Awaitable[AttemptSample | None]:
                # Also when the client disconnects: Starlette cancels the body.
                return serving.close(serving.served.stream.failure, cancelled)
            body = sse_body(served.stream, endpoint.model, chat.include_usage, trailer, serving.resume, close)
        return EventStream(body, headers)
    return await _answer_json(serving, api, headers, metadata)


async def serve_events(ctx: RequestContext, services: Services, api: ClientApi,
                       frame: Callable[[StreamRenderer], StreamRenderer] | None = None) -> AsyncIterator[bytes]:
    """Stages 4-6 for a planned streaming request whose events do not go out as an HTTP response (the
    Responses WebSocket): dispatch, then the client API's own stream events as its renderer gives
    them (`frame` may wrap the renderer), recorded when they end, as `_serve` does for a stream. A
    failure before the first event is raised, as it would be before an HTTP response started.
    Close it (`aclosing`) when done with it: closing early records the attempt as cancelled."""
    chat, plan = ctx.request, ctx.plan
    assert plan is not None and chat.stream
    served = await services.dispatcher.dispatch(chat, plan, ctx.preferences.hedge_after_ms)
    count_fallback(services.metrics, plan, served)
    renderer = api.stream_renderer(chat, served.stream.endpoint.model)
    assert renderer is not None  # only a client API with its own events comes this way
    if served.stream.native is not None:
        renderer = PassThrough(served.stream.native, renderer)  # the upstream's own events
    # No await from dispatch to the first event: the attempt is closed by `_render_stream` whatever happens.
    async with aclosing(_render_stream(Serving(services, ctx, served), frame(renderer) if frame else renderer,
                                       api)) as events:
        async for data in events:
            yield data


def prepare(chat: ChatRequest, headers: Mapping[str, str], services: Services, client: ApiKey | None,
            admit: bool = True) -> RequestContext:
    """Stages 2-3 (with the model check of stage 0) for a parsed request: resolve preferences, select;
    then, with `admit`, the key's limits and budget (stage 0's last check: a request refused for its
    model or its plan has not used any). Without `admit`, pure and no I/O: what `/v1/route` shows."""
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
    raw = await read_body(request, services.config.gateway.max_body_bytes, headers)
    chat = api.parse(raw, headers, request_id, services.config.gateway)
    chat = await api.recall(chat, services, client)
    request.scope["state"]["model"] = chat.model  # for the access-log line, should the request fail
    return prepare(chat, headers, services, client, admit)


async def handle(request: Request, services: Services, request_id: str, api: ClientApi = CHAT) -> Response:
    """admit -> parse -> resolve -> select -> dispatch -> relay -> record, for a request of client API `api`."""
    ctx = await plan_request(request, services, request_id, api)
    # Until the response starts, this watcher notices a client that hangs up; once a stream has
    # started, `EventStream` does the same.
    return await unless_disconnected(_serve(ctx, services, api), request.receive)
