"""One attempt at one endpoint, up to its first token: the body sent, the request, the status, the gate.

`open_attempt()` sends the request (always streaming, with usage: `upstreams.outgoing()` makes it in
the API the endpoint's provider speaks), turns a non-200
answer into the `UpstreamError` it means (`Retry-After` kept, the provider's text redacted, a refused
key reported as misconfiguration), and passes the first-chunk gate within the first-token budget.
`outcome_of()` names what a failed attempt was, for telemetry. Which endpoint to try, and what to do
after a failure, is the dispatcher's business (dispatch.py).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson

from gateway.config import Endpoint
from gateway.context import ChatRequest
from gateway.errors import GatewayError, UpstreamError, UpstreamMisconfigured, UpstreamTimeout, UpstreamUnreachable
from gateway.retry import rate_limit_reset, retry_after
from gateway.routing.filters import CHARS_PER_TOKEN
from gateway.serve.lag import Budget, LoopLag
from gateway.telemetry.sample import Outcome
from gateway.upstreams import Outgoing, dropped_for, outgoing
from gateway.upstreams.client import CONNECT_ERRORS, TRANSPORT_ERRORS, UpstreamResponse, Upstreams, redact
from gateway.upstreams.limit_headers import read as read_limits
from gateway.upstreams.openai_chat import UPSTREAM_PATHS
from gateway.upstreams.openai_chat import chat_body as upstream_body
from gateway.upstreams.stream import Meter, StreamBroken, TranslatedStream, UpstreamStream

__all__ = ["UPSTREAM_PATHS", "dropped_for", "open_attempt", "outcome_of", "outgoing", "prompt_estimate",
           "upstream_body"]

_MAX_ERROR_BODY = 64 * 1024
OVERLOADED = 529  # Anthropic's "overloaded": fails over as a 503 does


def prompt_estimate(request: ChatRequest) -> int:
    """Input tokens guessed from the request's size, for an upstream that reports no usage."""
    return -(-request.prompt_chars // CHARS_PER_TOKEN)


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


async def _error_from_response(response: UpstreamResponse, endpoint: Endpoint) -> UpstreamError:
    raw = b""
    try:
        async for part in response.aiter_raw():
            raw += part
            if len(raw) > _MAX_ERROR_BODY:
                break
    except TRANSPORT_ERRORS:
        pass
    finally:
        await response.aclose()
    status = 503 if response.status_code == OVERLOADED else response.status_code
    error: Any = None
    with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
        error = orjson.loads(raw).get("error")
    body = redact(error, endpoint.provider) if isinstance(error, dict) else None
    message = str(body.get("message")) if body and body.get("message") else f"upstream returned HTTP {status}"
    if status in (401, 403):
        # Our key is wrong or lacks access: that endpoint is misconfigured; the provider's text may
        # echo the key, so it is not passed on.
        return UpstreamMisconfigured(f"provider rejected the gateway's credentials (HTTP {status})", status)
    # A 429 without `retry-after` comes back when the limit its headers say is used up resets.
    reported = read_limits(response.headers, endpoint.provider.api == "anthropic")
    wait = rate_limit_reset(response.headers, reported) if status == 429 else retry_after(response.headers)
    err = UpstreamError(message, status=status, body=body, retry_after_s=wait)
    err.reported = reported  # the shaper learns from a 429's headers as from a 200's (dispatch.py)
    return err


async def open_attempt(upstreams: Upstreams, endpoint: Endpoint, body: Outgoing, meter: Meter, budget_s: float,
                       stall_s: float, lag: LoopLag | None = None, upstream: str = "chat",
                       streaming: bool = False) -> UpstreamStream:
    """Send, check the status, and pass the first-chunk gate, all within the first-token budget:
    upstream time, so the event loop's own lag meanwhile (`lag`) does not spend it. For embeddings,
    which do not stream, the whole answer within it. `streaming`: the client streams, so the first
    token is handed on before the rest of its read is parsed (see `UpstreamStream`)."""
    budget = Budget(budget_s, lag)
    try:
        with budget.timeout():
            response = await upstreams.open(endpoint, body.body, body.path, body.headers)
    except CONNECT_ERRORS as exc:  # before TimeoutError: aiohttp's connect timeout is one
        message = f"cannot connect to {endpoint.provider.name}: {type(exc).__name__}"
        raise UpstreamUnreachable(message) from None
    except TimeoutError:
        # Accepted the connection, never answered: the silent endpoint the budget is there for.
        raise UpstreamTimeout(f"no response within {budget_s:.1f} s") from None
    except TRANSPORT_ERRORS as exc:
        # Reset or closed before a response: worth one more try, unlike a refused connection.
        raise UpstreamError(f"{endpoint.provider.name} failed: {type(exc).__name__}", status=502) from None
    if response.status_code != 200:
        raise await _error_from_response(response, endpoint)
    if body.translator is None:
        stream = UpstreamStream(endpoint, response, meter, stall_s, lag, whole=upstream == "embeddings",
                                first_token_early=streaming, joins_text=not streaming and upstream == "chat")
    else:
        stream = TranslatedStream(endpoint, response, meter, stall_s, lag, translator=body.translator())
    stream.reported = read_limits(response.headers, endpoint.provider.api == "anthropic")
    try:
        await stream.open_gate(budget)
    except BaseException:
        await stream.aclose()
        raise
    return stream
