"""`send()` against scripted SSE streams (httpx.MockTransport, timed chunks) and a closed port."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Sequence

import httpx
import orjson
import pytest

from gateway.bench.models import RequestResult
from gateway.bench.stream import send

Script = Sequence[tuple[float, bytes]]  # (delay before the chunk, bytes)


def chunk(delta: dict | None = None, finish: str | None = None, usage: dict | None = None) -> bytes:
    event: dict = {"object": "chat.completion.chunk", "choices": []}
    if delta is not None or finish is not None:
        event["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish}]
    if usage is not None:
        event["usage"] = usage
    return b"data: " + orjson.dumps(event) + b"\n\n"


async def _play(script: Script) -> AsyncIterator[bytes]:
    for delay, data in script:
        await asyncio.sleep(delay)
        yield data


async def run(script: Script, status: int = 200, headers: dict | None = None, timeout_s: float = 5.0,
              body: bytes | None = None) -> RequestResult:
    def handler(request: httpx.Request) -> httpx.Response:
        if body is not None:
            return httpx.Response(status, content=body, headers=headers)
        return httpx.Response(status, content=_play(script), headers=headers)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        return await send(client, "http://sim/v1/chat/completions", b"{}", {}, timeout_s,
                          target="t", level=4, index=3, level_start=time.perf_counter() - 1.0)


async def test_reasoning_then_answer_with_usage() -> None:
    result = await run([
        (0.05, chunk({"role": "assistant", "reasoning_content": "hm"})),
        (0.05, chunk({"reasoning_content": " so"})),
        (0.05, chunk({"content": "a"})),
        (0.05, chunk({"content": "b"}) + chunk(finish="length")),
        (0.0, chunk(usage={"prompt_tokens": 7, "completion_tokens": 10}) + b"data: [DONE]\n\n"),
    ], headers={"x-ultraroute-endpoint": "sim/fast"})
    assert result.ok and result.error is None and result.status == 200
    assert (result.target, result.level, result.index) == ("t", 4, 3)
    assert result.started_s == pytest.approx(1.0, abs=0.05)
    assert result.endpoint == "sim/fast"
    assert result.ttft_s == pytest.approx(0.05, abs=0.03)
    assert result.answer_s == pytest.approx(0.15, abs=0.03)
    assert result.decode_s == pytest.approx(0.15, abs=0.03)
    assert result.e2e_s is not None and result.e2e_s >= result.decode_s + result.ttft_s
    assert result.output_tokens == 10 and result.prompt_tokens == 7 and result.usage_reported
    assert result.decode_tps == pytest.approx(9 / result.decode_s)


async def test_without_usage_counts_deltas_and_knows_openrouter_reasoning() -> None:
    result = await run([
        (0.0, chunk({"reasoning": "think"})),
        (0.02, chunk({"content": "x"}) + b"data: {not json\n\n" + chunk({"content": ""})),
        (0.02, chunk({"content": "y"}, finish="stop") + b"data: [DONE]\n\n"),
    ])
    assert result.ok
    assert result.output_tokens == 3 and not result.usage_reported  # the empty delta is not a token
    assert result.answer_s is not None and result.ttft_s is not None and result.answer_s > result.ttft_s


async def test_sse_error_event_is_a_failure() -> None:
    result = await run([(0.0, chunk({"content": "x"})),
                        (0.0, b'data: {"error": {"message": "boom", "code": 502}}\n\n')])
    assert not result.ok and result.error == "error event: boom"
    assert result.output_tokens == 1


async def test_http_error_names_status_and_message() -> None:
    body = orjson.dumps({"error": {"message": "Rate limit reached", "type": "rate_limit_exceeded"}})
    result = await run([], status=429, body=body)
    assert not result.ok and result.status == 429
    assert result.error == "http 429: Rate limit reached"
    assert result.ttft_s is None and result.output_tokens == 0


async def test_stream_that_just_stops_is_a_failure() -> None:
    result = await run([(0.0, chunk({"content": "x"}))])
    assert not result.ok and result.error == "stream ended early"


async def test_whole_request_deadline() -> None:
    # A token every 0.1 s never trips a per-read timeout; the request deadline still applies.
    result = await run([(0.1, chunk({"content": "x"}))] * 20, timeout_s=0.35)
    assert not result.ok and result.error == "timeout"
    assert result.e2e_s == pytest.approx(0.35, abs=0.1)


async def test_connect_error_is_a_result_not_an_exception() -> None:
    with socket.socket() as sock:  # a port nobody listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        async with httpx.AsyncClient() as client:
            result = await send(client, f"http://127.0.0.1:{port}/v1/chat/completions", b"{}", {}, 5.0,
                                target="t", level=1, index=0, level_start=time.perf_counter())
    assert not result.ok and result.status is None
    assert result.error is not None and result.error.startswith("connect")
