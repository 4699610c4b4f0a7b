"""The path of one chat completion, stage by stage. Start reading here.

    1. parse      request bytes -> ChatRequest                       (parse.py)
    2. resolve    body > headers > model suffix > named policy > default -> Preferences
    3. select     catalogue + live stats -> Plan: ordered candidates  (routing/)
    4. dispatch   walk the plan until one endpoint produces a token   (dispatch.py)
    5. relay      stream it to the client, or assemble the JSON       (relay.py)
    6. record     timings, tokens and cost of every attempt            (record.py)

`handle()` composes them; each stage is a plain function of typed, frozen values. Errors from any
stage are `GatewayError`s, rendered in one place (`app.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.types import Message

from gateway import routing
from gateway.context import ChatRequest, Plan, RequestContext
from gateway.dispatch import Served, dispatch, outcome_of
from gateway.errors import GatewayError
from gateway.parse import parse_chat_request
from gateway.record import record_attempt
from gateway.relay import collect, sse_body
from gateway.services import Services
from gateway.telemetry.sample import Outcome


def served_headers(ctx: RequestContext, served: Served) -> dict[str, str]:
    endpoint = served.stream.endpoint
    headers = {
        "x-request-id": ctx.request.request_id,
        "x-ultraroute-provider": endpoint.provider.name,
        "x-ultraroute-endpoint": endpoint.id,
        "x-ultraroute-tier": endpoint.tier.value,
        "x-ultraroute-attempts": str(len(ctx.attempts) + 1),
    }
    if ctx.attempts:
        hops = [*(a.endpoint_id for a in ctx.attempts), endpoint.id]
        reasons = ",".join(a.reason for a in ctx.attempts)
        headers["x-ultraroute-fallback"] = f"{'->'.join(hops)} ({reasons})"
    return headers


def finish(services: Services, served: Served, failure: GatewayError | None, cancelled: bool) -> None:
    """Stage 6 for the attempt that served; failed attempts were recorded as they failed."""
    stream = served.stream
    if cancelled:
        outcome, status = Outcome.CANCELLED, 200
    elif failure is not None:
        outcome, status = outcome_of(failure), failure.status
    else:
        outcome, status = Outcome.OK, 200
    record_attempt(services.telemetry, stream.endpoint, stream.meter, outcome, status, served.started_at,
                   served.in_flight_at_start)


async def _relay_stream(services: Services, served: Served, model: str, include_usage: bool
                        ) -> AsyncIterator[bytes]:
    cancelled = True
    try:
        async for data in sse_body(served.stream, model, include_usage):
            yield data
        cancelled = False
    finally:
        # Runs when the client disconnects too (Starlette cancels us): closing the response drops the
        # upstream connection, so the provider stops generating.
        await served.stream.aclose()
        finish(services, served, served.stream.failure, cancelled)


async def _until_disconnect(receive: Callable[[], Awaitable[Message]]) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(work: Awaitable[Response], receive: Callable[[], Awaitable[Message]]
                              ) -> Response:
    """Run `work`, abandoning it (and so its upstream request) as soon as the client hangs up."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_until_disconnect(receive))
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    if task.cancelled():
        return Response(status_code=499)  # nobody is listening; nginx's "client closed request"
    return task.result()


async def _collect_json(services: Services, served: Served, model: str) -> dict[str, Any]:
    failure: GatewayError | None = None
    cancelled = False
    try:
        return await collect(served.stream, model)
    except GatewayError as err:
        failure = err
        raise
    except asyncio.CancelledError:
        cancelled = True
        raise
    finally:
        await served.stream.aclose()
        finish(services, served, failure, cancelled)


async def _serve(chat: ChatRequest, plan: Plan, services: Services) -> Response:
    """Stages 4-6: dispatch, then relay (streaming) or collect (JSON); both end by recording."""
    served = await dispatch(chat, plan, services.upstreams, services.telemetry, services.limits)
    ctx = RequestContext(request=chat, plan=plan, attempts=served.attempts)
    headers = served_headers(ctx, served)
    if chat.stream:
        return StreamingResponse(
            _relay_stream(services, served, plan.model, chat.include_usage),
            media_type="text/event-stream",
            headers={**headers, "cache-control": "no-cache"},
        )
    completion = await _collect_json(services, served, plan.model)
    completion["provider"] = served.stream.endpoint.provider.name  # as OpenRouter reports it
    return Response(orjson.dumps(completion), media_type="application/json", headers=headers)


async def handle(request: Request, services: Services, request_id: str) -> Response:
    """parse -> resolve -> select -> dispatch -> relay -> record."""
    raw = await request.body()
    chat = parse_chat_request(raw, request.headers, request_id, services.config.gateway.max_body_bytes)
    plan = routing.plan(services.config.catalogue, chat)
    # Until the response starts, only this watcher notices a client that hangs up; once a stream
    # has started, Starlette's StreamingResponse does the same.
    return await unless_disconnected(_serve(chat, plan, services), request.receive)
