"""Stage 4, dispatch: walk the plan until one endpoint passes the first-chunk gate.

One visible loop over the ordered candidates. For each: send the request (always streaming, with
usage), check the status, and wait for the first token within the first-token budget. A failure that
another endpoint could fix (429, 5xx, timeouts, connect errors, a provider refusing our key) moves on
to the next candidate; a client error (400, 404, 413, 422) returns at once. Every attempt, failed or
not, is recorded. When the plan runs out, `AllCandidatesFailed` carries every failure.

Nothing reaches the client before the gate opens, so failover is invisible to it. What happens after
the gate (relaying, recording the served attempt) is the relay's and the pipeline's job.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Any

import httpx
import orjson

from gateway.config import Endpoint
from gateway.context import Attempt, ChatRequest, Plan
from gateway.errors import (
    AllCandidatesFailed,
    GatewayError,
    UpstreamError,
    UpstreamMisconfigured,
    UpstreamTimeout,
    UpstreamUnreachable,
)
from gateway.record import Recorder
from gateway.relay import Meter, StreamBroken, UpstreamStream
from gateway.telemetry.sample import Outcome
from gateway.upstream import Upstreams

_MAX_ERROR_BODY = 64 * 1024


@dataclass(frozen=True, slots=True)
class DispatchLimits:
    first_token_budget_s: float
    stall_timeout_s: float


@dataclass(slots=True)
class Served:
    """The attempt that passed the gate; the pipeline relays it and then records it."""

    stream: UpstreamStream
    attempts: tuple[Attempt, ...]  # the failed attempts before it
    started_at: float  # wall clock
    in_flight_at_start: int


def upstream_body(request: ChatRequest, endpoint: Endpoint) -> bytes:
    body = {**request.body, **endpoint.extra_body} if endpoint.extra_body else dict(request.body)
    body["model"] = endpoint.upstream_model
    body["stream"] = True  # always: so time to first token and decode rate are measured for every request
    body["stream_options"] = {**(request.body.get("stream_options") or {}), "include_usage": True}
    return orjson.dumps(body)


def outcome_of(err: GatewayError) -> Outcome:
    if isinstance(err, UpstreamUnreachable):
        return Outcome.CONNECT_ERROR
    if isinstance(err, UpstreamTimeout) or (isinstance(err, StreamBroken) and err.status in (408, 504)):
        return Outcome.TIMEOUT
    if err.status == 429:
        return Outcome.RATE_LIMITED
    if isinstance(err, UpstreamMisconfigured) or err.status >= 500:
        return Outcome.SERVER_ERROR
    return Outcome.CLIENT_ERROR


def _retry_after(headers: httpx.Headers) -> float | None:
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


async def _error_from_response(response: httpx.Response) -> UpstreamError:
    raw = b""
    try:
        async for part in response.aiter_raw():
            raw += part
            if len(raw) > _MAX_ERROR_BODY:
                break
    except httpx.HTTPError:
        pass
    finally:
        await response.aclose()
    status = response.status_code
    error: Any = None
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
        error = orjson.loads(raw).get("error")
    body = error if isinstance(error, dict) else None
    message = str(body.get("message")) if body and body.get("message") else f"upstream returned HTTP {status}"
    if status in (401, 403):
        # Our key is wrong or lacks access: that endpoint is misconfigured; the provider's text may
        # echo the key, so it is not passed on.
        return UpstreamMisconfigured(f"provider rejected the gateway's credentials (HTTP {status})", status)
    return UpstreamError(message, status=status, body=body, retry_after_s=_retry_after(response.headers))


async def _try(
    upstreams: Upstreams, endpoint: Endpoint, body: bytes, meter: Meter, limits: DispatchLimits
) -> UpstreamStream:
    try:
        response = await upstreams.open(endpoint, body)
    except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
        message = f"cannot connect to {endpoint.provider.name}: {type(exc).__name__}"
        raise UpstreamUnreachable(message) from None
    except httpx.HTTPError as exc:
        raise UpstreamUnreachable(f"{endpoint.provider.name} failed: {type(exc).__name__}") from None
    if response.status_code != 200:
        raise await _error_from_response(response)
    stream = UpstreamStream(endpoint, response, meter, limits.stall_timeout_s)
    try:
        await stream.open_gate(limits.first_token_budget_s)
    except BaseException:
        await stream.aclose()
        raise
    return stream


async def dispatch(
    request: ChatRequest, plan: Plan, upstreams: Upstreams, recorder: Recorder, limits: DispatchLimits
) -> Served:
    """Try the plan's candidates in order; return the first that produces a token."""
    attempts: list[Attempt] = []
    failures: list[tuple[str, GatewayError]] = []
    for endpoint in plan.endpoints:
        in_flight = recorder.begin(endpoint)
        started_at = time.time()
        meter = Meter(t_sent=time.perf_counter())
        try:
            stream = await _try(upstreams, endpoint, upstream_body(request, endpoint), meter, limits)
        except GatewayError as err:
            outcome = outcome_of(err)
            recorder.record(endpoint, meter, outcome, err.status, started_at, in_flight)
            attempts.append(Attempt(endpoint.key, endpoint.id, endpoint.tier.value, outcome, err.status,
                                    err.metric_label, time.perf_counter() - meter.t_sent))
            failures.append((endpoint.id, err))
            if outcome is Outcome.CLIENT_ERROR:
                raise  # the request itself is wrong: another endpoint would say the same
            continue
        except BaseException:
            # The client went away (cancellation) while we waited: still pair begin() with end().
            recorder.record(endpoint, meter, Outcome.CANCELLED, None, started_at, in_flight)
            raise
        return Served(stream, tuple(attempts), started_at, in_flight)
    if not failures:
        raise UpstreamUnreachable(f"no endpoint of '{plan.model}' is available")
    raise AllCandidatesFailed(failures)
