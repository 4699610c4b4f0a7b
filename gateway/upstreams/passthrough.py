"""Same API in and out: the client gets the upstream's own events, as they came.

A pass-through translator (anthropic.py's `MessagesPassThrough`, openai_responses.py's
`ResponsesPassThrough`) keeps every upstream event while translating it, so the gateway measures
the stream as any other. `PassThrough` is the `StreamRenderer` that hands those kept events on, in
place of the client API's own renderer (which still renders a failure, in the API's error shape).
`NativeAnswer` is the assembler of a JSON client's answer: the upstream's own answer object.
`without` is the client's body as each upstream module's `passthrough_body` starts from it.
"""

from __future__ import annotations

from typing import Any, Protocol

from gateway.errors import GatewayError


def without(client: dict[str, Any], fields: frozenset[str]) -> dict[str, Any]:
    """A copy of a client's body without the gateway's own `fields`. (A plain copy where the client
    sent none of them, as most do: a comprehension costs ~4k instructions more.)"""
    if fields.isdisjoint(client):
        return dict(client)
    return {k: v for k, v in client.items() if k not in fields}


class Native(Protocol):
    """A pass-through translator, as the relay sees it."""

    def take(self) -> bytes: ...  # the events kept since the last take, as SSE bytes for the client
    def result(self) -> dict[str, Any]: ...  # the whole answer object (a client that did not stream)


class _Renderer(Protocol):
    def fail(self, err: GatewayError) -> bytes: ...
    def result(self) -> dict[str, Any] | None: ...


class PassThrough:
    """The upstream's events to a streaming client (a `StreamRenderer`)."""

    __slots__ = ("_native", "_own")

    def __init__(self, native: Native, own: _Renderer) -> None:
        self._native = native
        self._own = own  # the client API's renderer: its error events

    def start(self) -> bytes:
        return b""  # the upstream's own opening event comes with its first batch

    def feed(self, chunks: list[dict[str, Any]]) -> bytes:
        return self._native.take()

    def finish(self) -> bytes:
        return self._native.take()

    def fail(self, err: GatewayError) -> bytes:
        return self._native.take() + self._own.fail(err)

    def result(self) -> dict[str, Any] | None:
        """The finished answer object (a Responses answer is stored from it when the client asked)."""
        return self._native.result() or None


class NativeAnswer:
    """The `Assembler` of a pass-through JSON answer: the upstream's own object, not chat's."""

    __slots__ = ("_native", "usage")

    def __init__(self, native: Native) -> None:
        self._native = native
        self.usage: dict[str, Any] | None = None

    def add(self, chunk: dict[str, Any]) -> None:
        pass  # the chunks were metered; the answer is the upstream's own

    def result(self, model: str) -> dict[str, Any]:
        return self._native.result()
