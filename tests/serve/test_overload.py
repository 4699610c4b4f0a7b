"""Admission (serve/overload.py): the count, what it covers, and what it never refuses."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from gateway.serve.overload import Admission


def scope(method: str = "POST", path: str = "/v1/chat/completions") -> Scope:
    return {"type": "http", "method": method, "path": path}


async def test_refuses_past_the_limit_and_counts_until_the_response_ends() -> None:
    release = asyncio.Event()
    served: list[str] = []
    refused: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await release.wait()  # a response still streaming
        served.append(scope["path"])

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        refused.append(scope["path"])

    async def receive() -> Message:
        return {"type": "http.request"}

    async def send(message: Message) -> None:
        pass

    admission = Admission(limit=2, refuse=refuse)
    guarded = admission.guard(app)
    running = [asyncio.ensure_future(guarded(scope(), receive, send)) for _ in range(2)]
    await asyncio.sleep(0)
    assert admission.in_flight == 2
    await guarded(scope(), receive, send)  # the third: refused at once, while two are in flight
    assert refused == ["/v1/chat/completions"] and not served
    for exempt in (scope("GET", "/v1/endpoints"), scope("GET", "/metrics"), scope("POST", "/admin/keys")):
        release.set()
        await guarded(exempt, receive, send)  # operator routes are never refused, nor counted
    await asyncio.gather(*running)
    assert admission.in_flight == 0 and len(refused) == 1 and len(served) == 5
    release.clear()
    release.set()
    await guarded(scope(), receive, send)  # room again
    assert len(served) == 6 and len(refused) == 1


async def test_a_failing_request_gives_its_place_back() -> None:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    async def refuse(scope: Scope, receive: Receive, send: Send) -> None:
        raise AssertionError("not refused")

    admission = Admission(limit=1, refuse=refuse)
    guarded = admission.guard(app)
    for _ in range(3):
        with pytest.raises(RuntimeError):
            await guarded(scope(), None, None)  # type: ignore[arg-type]
    assert admission.in_flight == 0
