"""One streamed chat completion, timed as its bytes arrive: the bench's only HTTP code.

Does: POST a prepared body with `httpx.AsyncClient.stream`, split the SSE stream with the gateway's
`SSEDecoder`, parse each payload once with orjson, and stamp every network read with
`time.perf_counter()` as it arrives; turn the stream into a `RequestResult` (TTFT, first answer
token, first/last token, usage, the `x-ultraroute-endpoint` header). Every failure (HTTP status,
connect error, SSE `error` event, timeout, truncated stream, anything else) becomes an `ok=False`
result: this function does not raise, except on cancellation.
Does not: choose prompts, pace requests or aggregate (see `runner.py`, `metrics.py`).

Why so plain: at 64 concurrent streams a slow client is itself the bottleneck and makes every
endpoint look slower, so the loop does one orjson parse per event and no per-token allocations.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping

import httpx
import orjson

from gateway.bench.models import RequestResult
from gateway.upstreams.sse import DONE, SSEDecoder

_ERROR_BODY_BYTES = 300  # enough of an error body to name the problem in the table


class _Stream:
    """What one stream has shown so far (mutable while reading, then frozen into a result)."""

    __slots__ = ("answer", "completion", "deltas", "done", "error", "finished", "first", "last", "prompt", "tier")

    def __init__(self) -> None:
        self.first: float | None = None
        self.answer: float | None = None
        self.last: float | None = None
        self.deltas = 0
        self.completion: int | None = None
        self.prompt = 0
        self.done = False
        self.finished = False
        self.error: str | None = None
        self.tier: str | None = None  # the provider's `service_tier` (the gateway passes it on)

    def take(self, payload: bytes, now: float) -> None:
        """One SSE data payload, received at `now`."""
        if payload == DONE:
            self.done = True
            return
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return  # a malformed event: the stream goes on, as it does in the OpenAI SDK
        if not isinstance(event, dict):
            return
        if event.get("error"):
            error = event["error"]
            message = error.get("message") if isinstance(error, dict) else error
            self.error = f"error event: {str(message)[:120]}"
            return
        usage = event.get("usage")
        if isinstance(usage, dict):
            tier = event.get("service_tier")  # on the usage chunk at least (the gateway's translations too)
            if isinstance(tier, str):
                self.tier = tier
            if isinstance(usage.get("completion_tokens"), int):
                self.completion = usage["completion_tokens"]
            if isinstance(usage.get("prompt_tokens"), int):
                self.prompt = usage["prompt_tokens"]
        choices = event.get("choices")
        if not choices or not isinstance(choices[0], dict):
            return
        choice = choices[0]
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            # DeepSeek and vLLM say reasoning_content; OpenRouter and newer vLLM say reasoning.
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if content or reasoning:
                self.deltas += 1
                if self.first is None:
                    self.first = now
                if content and self.answer is None:
                    self.answer = now
                self.last = now
        if choice.get("finish_reason"):
            self.finished = True


def _error_text(status: int, body: bytes) -> str:
    try:
        parsed = orjson.loads(body)
        error = parsed.get("error") if isinstance(parsed, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
    except orjson.JSONDecodeError:
        message = None
    text = message or body[:_ERROR_BODY_BYTES].decode("utf-8", "replace").strip()
    return f"http {status}: {text[:240]}" if text else f"http {status}"


def _kind_of(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return f"connect: {exc}"[:140]
    if isinstance(exc, httpx.HTTPError):
        return f"stream: {type(exc).__name__}: {exc}"[:140]
    return f"{type(exc).__name__}: {exc}"[:140]


async def send(
    client: httpx.AsyncClient,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    timeout_s: float,
    *,
    target: str,
    level: int,
    index: int,
    level_start: float,
) -> RequestResult:
    """Send one request and read its stream to the end; never raises (but lets cancellation through)."""
    state = _Stream()
    status: int | None = None
    endpoint: str | None = None
    clock = time.perf_counter
    sent = clock()
    try:
        # One deadline for the whole request: httpx's own timeouts are per read, so a stream that
        # trickles a token every few seconds would otherwise never time out.
        async with asyncio.timeout(timeout_s), client.stream("POST", url, content=body, headers=headers) as r:
            status = r.status_code
            endpoint = r.headers.get("x-ultraroute-endpoint")
            if status >= 400:
                state.error = _error_text(status, await r.aread())
            else:
                decoder = SSEDecoder()
                async for chunk in r.aiter_bytes():
                    now = clock()  # one stamp per network read, before any parsing
                    for payload in decoder.feed(chunk):
                        state.take(payload, now)
                    if state.error is not None:
                        break
                if state.error is None and not (state.done or state.finished):
                    state.error = "stream ended early"
    except Exception as exc:  # every failure is a result, never a crash of the run
        state.error = _kind_of(exc)
    end = clock()
    first, last = state.first, state.last
    return RequestResult(
        target=target,
        level=level,
        index=index,
        ok=state.error is None,
        error=state.error,
        status=status,
        endpoint=endpoint,
        started_s=sent - level_start,
        ttft_s=None if first is None else first - sent,
        answer_s=None if state.answer is None else state.answer - sent,
        e2e_s=end - sent,
        decode_s=None if first is None or last is None else last - first,
        output_tokens=state.completion if state.completion is not None else state.deltas,
        prompt_tokens=state.prompt,
        usage_reported=state.completion is not None,
        served_tier=state.tier,
    )
