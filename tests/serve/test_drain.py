"""`DrainGate` in process: refusals while draining, and what the cut sends (the e2e tests drive a
real process with signals; these pin the ASGI messages)."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from gateway.serve.drain import Drain, DrainGate, drain

SSE = [(b"content-type", b"text/event-stream")]


def _scope(path: str = "/v1/chat/completions") -> dict[str, Any]:
    return {"type": "http", "path": path}


async def _recv() -> dict[str, Any]:
    return {"type": "http.request", "body": b""}


async def _run(gate: DrainGate, path: str = "/v1/chat/completions") -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await gate(_scope(path), _recv, send)
    return sent


async def _ok(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_while_draining_new_requests_get_503_and_operator_paths_pass() -> None:
    state = Drain()
    gate = DrainGate(_ok, state)
    assert asyncio.run(_run(gate))[0]["status"] == 200 and not state.active
    state.begin()
    refused = asyncio.run(_run(gate))
    headers = dict(refused[0]["headers"])
    assert refused[0]["status"] == 503
    assert headers[b"retry-after"] == b"1" and headers[b"connection"] == b"close"
    assert orjson.loads(refused[1]["body"])["error"]["code"] == "shutting_down"
    assert asyncio.run(_run(gate, "/healthz"))[0]["status"] == 200  # the route itself says 503


def test_the_cut_ends_a_stream_with_an_error_event_and_a_waiting_request_with_503() -> None:
    async def stream(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": SSE})
        await send({"type": "http.response.body", "body": b"data: {}\n\n", "more_body": True})
        await asyncio.sleep(60)

    async def waiting(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(60)

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        state = Drain()
        runs = [asyncio.create_task(_run(DrainGate(app, state))) for app in (stream, waiting)]
        await asyncio.sleep(0.05)
        await asyncio.wait_for(drain(state, grace_s=0.1), 10)
        assert not state.active
        return await runs[0], await runs[1]

    streamed, waited = asyncio.run(scenario())
    assert streamed[-1]["more_body"] is False
    last = orjson.loads(streamed[-1]["body"].removeprefix(b"data: "))
    assert last["error"]["code"] == "shutting_down" and "shutdown_grace_s" in last["error"]["message"]
    assert waited[0]["status"] == 503
