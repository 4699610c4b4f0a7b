"""Stage 5, relay: hand an upstream stream's batches (upstream_stream.py) to the client.

Two ways out to the client: `sse_body()` passes each batch on as soon as it arrives (no buffering),
as the provider's own bytes: only `model` is changed to the public name (`PublicModel`, a byte
replace; a chunk it cannot patch safely is re-encoded) and the usage the gateway asked for is taken
out if the client did not ask for it. `collect()` assembles a `chat.completion` for clients that did
not stream.
A failure after the first byte has reached the client is either recovered -- a `resume` callback
continues the answer on another endpoint, given the text so far -- or ends the stream with an SSE
`error` event, which the OpenAI SDK raises, never a silent truncation. This stage does not choose
endpoints or retry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import orjson

from gateway.assemble import CompletionAssembler
from gateway.errors import GatewayError
from gateway.sse import DONE_EVENT, encode_event
from gateway.upstream_stream import Event, UpstreamStream

Resume = Callable[[UpstreamStream, str], Awaitable["UpstreamStream | None"]]


class ChunkBatches:
    """The stream's batches of events; when it breaks mid-way, continue on another endpoint if `resume`
    finds one (it is given the answer text so far and returns the continuation's stream), else raise.

    A class rather than an async generator: every async generator costs a registration with the
    event loop, and this one runs once per request."""

    __slots__ = ("delivered", "resume", "stream")

    def __init__(self, stream: UpstreamStream, resume: Resume | None) -> None:
        self.stream = stream
        self.resume = resume
        self.delivered = ""  # the answer of the streams before this one

    def __aiter__(self) -> ChunkBatches:
        return self

    async def __anext__(self) -> list[Event]:
        while True:
            stream = self.stream
            try:
                events = await stream.next_batch()
            except GatewayError as err:
                stream.failure = err
                self.delivered += "".join(stream.answer)
                follow = await self.resume(stream, self.delivered) if self.resume is not None else None
                if follow is None:
                    raise
                self.stream = follow
                continue
            if events is None:
                raise StopAsyncIteration
            return events


async def sse_body(
    stream: UpstreamStream, model: str, include_usage: bool, trailer: Callable[[], bytes] | None = None,
    resume: Resume | None = None,
) -> AsyncIterator[bytes]:
    """Client-facing SSE bytes, one write per upstream read. Ends with `[DONE]` (after `trailer()`, an
    extra event such as the gateway's metadata, built when the stream has ended) or with an `error`
    event."""
    public = PublicModel(model)
    last: dict[str, Any] = {}
    try:
        async for events in ChunkBatches(stream, resume):
            last = events[-1][1]
            out = []
            for payload, chunk in events:
                if not include_usage and "usage" in chunk:
                    if not chunk.get("choices"):
                        continue  # the usage-only chunk the gateway asked for, not the client
                    out.append(public.without_usage(payload, chunk))
                else:
                    out.append(public(payload, chunk))
            if out:
                yield b"data: " + b"\n\ndata: ".join(out) + b"\n\n"
    except GatewayError as err:
        # Bytes have already reached the client: no failover now, and no fake clean finish either.
        yield error_event(err)
        return
    if include_usage and stream.meter.usage_estimated:  # the usage chunk the upstream did not send
        yield encode_event(orjson.dumps({"id": last.get("id", ""), "object": "chat.completion.chunk",
                                         "created": last.get("created", 0), "model": model, "choices": [],
                                         "usage": stream.meter.usage}))
    yield trailer() + DONE_EVENT if trailer else DONE_EVENT


_NULL_USAGE = b',"usage":null'


class PublicModel:
    """Gives a chunk the public model name without re-encoding it: the provider's compact
    `"model":"<its name>"` is replaced in the bytes when it occurs exactly once (a JSON string value
    cannot contain it unescaped, so once means the chunk's own field). A chunk that has no `model`,
    or where the pattern is missing or repeated, is re-encoded, as every chunk used to be."""

    __slots__ = ("_from", "_pattern", "_target", "model")

    def __init__(self, model: str) -> None:
        self.model = model
        self._target = b'"model":' + orjson.dumps(model)
        self._from: object = None
        self._pattern = b""

    def __call__(self, payload: bytes, chunk: dict[str, Any]) -> bytes:
        upstream = chunk.get("model")
        if upstream == self.model:
            return payload
        if upstream is not None and upstream != self._from and isinstance(upstream, str):
            self._from, self._pattern = upstream, b'"model":' + orjson.dumps(upstream)
        if upstream == self._from and payload.count(self._pattern) == 1:
            return payload.replace(self._pattern, self._target)
        chunk["model"] = self.model
        return orjson.dumps(chunk)

    def without_usage(self, payload: bytes, chunk: dict[str, Any]) -> bytes:
        """The chunk without its `usage` field (most often `"usage":null`, as OpenAI sends it)."""
        if chunk["usage"] is None and payload.count(_NULL_USAGE) == 1:
            return self(payload.replace(_NULL_USAGE, b""), chunk)
        del chunk["usage"]
        chunk["model"] = self.model
        return orjson.dumps(chunk)


def error_event(err: GatewayError) -> bytes:
    return encode_event(orjson.dumps({"error": err.error_object()}))


class Assembler(Protocol):
    usage: dict[str, Any] | None

    def add(self, chunk: dict[str, Any]) -> None: ...
    def result(self, model: str) -> dict[str, Any]: ...


async def collect(stream: UpstreamStream, model: str, resume: Resume | None = None,
                  assembler: Assembler | None = None) -> dict[str, Any]:
    """Read the whole stream and assemble a `chat.completion` (or what `assembler` makes of it)."""
    assembler = assembler or CompletionAssembler()
    async for events in ChunkBatches(stream, resume):
        for _, chunk in events:
            assembler.add(chunk)
    assembler.usage = assembler.usage or stream.meter.usage  # estimated when the upstream sent none
    return assembler.result(model)
