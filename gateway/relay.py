"""Stage 5, relay: hand an upstream stream's batches (upstreams/stream.py) to the client.

Two ways out to the client: `sse_body()` passes each batch on as soon as it arrives (no buffering),
as the provider's own bytes: only `model` is changed to the public name (`PublicModel` of
upstreams/wire.py, which pass-through translators use too: a byte replace; a chunk it cannot patch
safely is re-encoded) and the usage the gateway asked for is taken out if the client did not ask
for it. `collect()` assembles a `chat.completion` for clients that did
not stream.
A failure after the first byte has reached the client is either recovered -- a `resume` callback
continues the answer on another endpoint, given the text so far and the tokens delivered (or ends it
with finish reason `length` when nothing is left of `max_tokens`) -- or ends the stream with an SSE
`error` event, which the OpenAI SDK raises, never a silent truncation. After a continuation the usage
the client sees counts every token it received: the prompt once, the completion tokens of every
stream (`ChunkBatches.client_usage`). This stage does not choose endpoints or retry.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.errors import GatewayError
from gateway.upstreams.assemble import CompletionAssembler
from gateway.upstreams.sse import DONE_EVENT, encode_event
from gateway.upstreams.stream import Event, UpstreamStream
from gateway.upstreams.wire import PublicModel


@dataclass(frozen=True, slots=True)
class Ended:
    """What `resume` returns when the answer is whole as it stands (nothing is left of `max_tokens`):
    the stream ends with this finish reason, as the upstream would have ended it."""

    finish_reason: str


# Given the broken stream, the answer text so far and the tokens delivered so far (of every stream).
Resume = Callable[[UpstreamStream, str, int], Awaitable["UpstreamStream | Ended | None"]]


class ChunkBatches:
    """The stream's batches of events; when it breaks mid-way, continue on another endpoint if `resume`
    finds one (it is given the answer text so far and returns the continuation's stream), else raise.
    After a continuation, a chunk's `usage` is the whole answer's (`client_usage`).

    A class rather than an async generator: every async generator costs a registration with the
    event loop, and this one runs once per request."""

    __slots__ = ("carried", "delivered", "ended", "last", "prompt_tokens", "resume", "stream")

    def __init__(self, stream: UpstreamStream, resume: Resume | None) -> None:
        self.stream = stream
        self.resume = resume
        self.delivered = ""  # the answer of the streams before this one
        self.carried = 0  # the tokens the client got from the streams before this one
        self.prompt_tokens: int | None = None  # the first stream's, once continued: the prompt the client sent
        self.ended = False
        self.last: dict[str, Any] = {}  # the last chunk, whose id a finish chunk of our own repeats

    def __aiter__(self) -> ChunkBatches:
        return self

    async def __anext__(self) -> list[Event]:
        while True:
            stream = self.stream
            if self.ended:
                raise StopAsyncIteration
            try:
                events = await stream.next_batch()
            except GatewayError as err:
                stream.failure = err
                self.delivered += "".join(stream.answer)
                used = self.carried + stream.meter.output_tokens
                follow = await self.resume(stream, self.delivered, used) if self.resume is not None else None
                if follow is None:
                    raise
                if isinstance(follow, Ended):
                    self.ended = True
                    return [self._finish(follow.finish_reason)]
                self._carry(stream)
                self.stream = follow
                continue
            if events is None:
                raise StopAsyncIteration
            self.last = events[-1][1]
            if self.prompt_tokens is not None:  # continued: the upstream's usage is of its part alone
                return [self._whole_usage(event) for event in events]
            return events

    def _carry(self, broken: UpstreamStream) -> None:
        usage = broken.meter.usage or {}  # settled (estimated) when the broken stream was closed
        if self.prompt_tokens is None:
            prompt = usage.get("prompt_tokens")
            self.prompt_tokens = prompt if isinstance(prompt, int) else broken.meter.prompt_estimate
        self.carried += broken.meter.output_tokens

    def client_usage(self, usage: dict[str, Any] | None) -> dict[str, Any] | None:
        """`usage` of the stream serving now, as the client must see it: after a continuation, its
        prompt once and the completion tokens of every stream; estimated if any part was."""
        if self.prompt_tokens is None or usage is None:
            return usage
        completion = self.carried + int(usage.get("completion_tokens") or 0)
        whole = {"prompt_tokens": self.prompt_tokens, "completion_tokens": completion,
                 "total_tokens": self.prompt_tokens + completion}
        if "completion_tokens_details" in usage:
            whole["completion_tokens_details"] = usage["completion_tokens_details"]
        whole["estimated"] = True  # the broken stream's figures are the gateway's count
        return whole

    def _whole_usage(self, event: Event) -> Event:
        chunk = event[1]
        if not chunk.get("usage"):
            return event
        chunk["usage"] = self.client_usage(chunk["usage"])
        return orjson.dumps(chunk), chunk

    def _finish(self, finish_reason: str) -> Event:
        last = self.last
        chunk = {"id": last.get("id", ""), "object": "chat.completion.chunk", "created": last.get("created", 0),
                 "model": last.get("model", ""),
                 "choices": [{"index": 0, "delta": {}, "logprobs": None, "finish_reason": finish_reason}]}
        return orjson.dumps(chunk), chunk


async def sse_body(
    stream: UpstreamStream, model: str, include_usage: bool, trailer: Callable[[], bytes] | None = None,
    resume: Resume | None = None, close: Callable[[bool], Awaitable[object]] | None = None,
) -> AsyncIterator[bytes]:
    """Client-facing SSE bytes, one write per upstream read. Ends with `[DONE]` (after `trailer()`, an
    extra event such as the gateway's metadata, built when the stream has ended) or with an `error`
    event. `close(cut_short)` is awaited once the body has ended, also when it did not reach its end
    (`cut_short`: the client left, or the body was closed early): the pipeline records the attempt
    there. One generator from the upstream's batches to the client's writes: a generator wrapping
    this one cost each write (the first token's too) another resumption."""
    public = PublicModel(model)
    batches = ChunkBatches(stream, resume)
    ended = False
    try:
        try:
            async for events in batches:
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
            ended = True
            return
        final = batches.stream  # after a continuation, not the stream it began on
        if include_usage and final.meter.usage_estimated:  # the usage chunk the upstream did not send
            last = batches.last
            yield encode_event(orjson.dumps({"id": last.get("id", ""), "object": "chat.completion.chunk",
                                             "created": last.get("created", 0), "model": model, "choices": [],
                                             "usage": batches.client_usage(final.meter.usage)}))
        yield trailer() + DONE_EVENT if trailer else DONE_EVENT
        ended = True
    finally:
        if close is not None:
            await close(not ended)


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
    batches = ChunkBatches(stream, resume)
    async for events in batches:
        for _, chunk in events:
            assembler.add(chunk)
    # Estimated when the upstream sent none; after a continuation, of the whole answer.
    assembler.usage = assembler.usage or batches.client_usage(batches.stream.meter.usage)
    return assembler.result(model)
