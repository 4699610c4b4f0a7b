"""Stage 5, relay: read an upstream SSE stream, time it, and hand it to the client.

`UpstreamStream` wraps one opened upstream response. `open_gate()` reads until the first token (the
first-chunk gate: until then nothing has been sent to the client, so the dispatcher may still fail
over). `batches()` then yields the events of each network read -- each as its raw `data:` payload and
its parsed chunk -- timing them in a `Meter`: time to first token, time to first answer token, last
token, token counts and `usage`.

When the upstream sent no usage (llama.cpp's server ignores `stream_options.include_usage`), the
meter estimates it at the end (`Meter.settle_usage`): output tokens from the token chunks relayed,
input tokens from the request's size; the usage object then says `"estimated": true`, a streaming
client that asked for usage still gets its usage chunk, and cost and budgets use the figure.

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

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from gateway.assemble import CompletionAssembler
from gateway.config import Endpoint
from gateway.errors import GatewayError, UpstreamError, UpstreamTimeout
from gateway.serve.lag import Budget, LoopLag
from gateway.sse import DONE, DONE_EVENT, SSEDecoder, encode_event
from gateway.upstream import TRANSPORT_ERRORS, UpstreamResponse, redact


class StreamBroken(UpstreamError):
    """The upstream failed after its first token: a read error, a stall, or an error event."""

    def __init__(self, message: str, status: int = 502, body: dict[str, Any] | None = None) -> None:
        super().__init__(message, status=status, body=body)
        self.metric_label = "stream_broken"


@dataclass(slots=True)
class Meter:
    """Timings (perf_counter seconds) and counts of one attempt. Mutable; owned by one coroutine."""

    t_sent: float
    t_first: float | None = None
    t_first_answer: float | None = None
    t_last: float | None = None
    t_end: float | None = None
    token_chunks: int = 0
    usage: dict[str, Any] | None = None
    malformed: int = 0
    done: bool = False
    prompt_estimate: int = 0  # input tokens estimated from the request, for when no usage comes
    usage_estimated: bool = False

    def settle_usage(self) -> None:
        """At the end of a stream that produced something: when the upstream sent no usage, estimate it."""
        if self.usage is None and (self.t_first is not None or self.done):
            output = self.token_chunks
            self.usage = {"prompt_tokens": self.prompt_estimate, "completion_tokens": output,
                          "total_tokens": self.prompt_estimate + output, "estimated": True}
            self.usage_estimated = True

    @property
    def output_tokens(self) -> int:
        if self.usage and isinstance(self.usage.get("completion_tokens"), int):
            return int(self.usage["completion_tokens"])
        return self.token_chunks

    @property
    def decode_tps(self) -> float | None:
        n = self.output_tokens
        if n < 2 or self.t_first is None or self.t_last is None or self.t_last <= self.t_first:
            return None
        return (n - 1) / (self.t_last - self.t_first)


Event = tuple[bytes, dict[str, Any]]  # one SSE `data:` payload as received, and its parsed chunk
# Told a running stream's progress (the recorder's `progress`): endpoint, meter, sent at, in flight then.
Progress = Callable[[Endpoint, Meter, float, int], None]
PROGRESS_S = 0.25  # a running stream's decode rate is reported this long after its first token, and every this


def _error_from_event(error: Any) -> UpstreamError:
    body = error if isinstance(error, dict) else {"message": str(error)}
    code = body.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else 502
    return UpstreamError(str(body.get("message") or "upstream error event"), status=status, body=body)


class UpstreamStream:
    def __init__(self, endpoint: Endpoint, response: UpstreamResponse, meter: Meter, stall_s: float,
                 lag: LoopLag | None = None, whole: bool = False) -> None:
        self.endpoint = endpoint
        self._lag = lag  # the loop's own lag does not count against the stall timeout
        self.whole = whole  # one JSON answer, not SSE (embeddings): read whole at the gate
        self.meter = meter
        self._response = response
        self._reads = response.aiter_raw()
        self._decoder = SSEDecoder()
        self._stall_s = stall_s
        self._pending: list[Event] = []
        self.answer: list[str] = []  # choice 0's content read so far: what a continuation is given
        self._ended = False
        self.failure: GatewayError | None = None  # set when the stream broke after the gate
        self.exhausted_for_s: float | None = None  # the provider said its rate limit is used up
        self._progress: Progress | None = None
        self._progress_of: tuple[float, int] = (0.0, 0)  # sent at (wall clock), in flight then
        self._check_at = float("inf")  # perf_counter time of the next progress report

    def watch(self, progress: Progress, started_at: float, in_flight_at_start: int) -> None:
        """Report the decode rate while the stream runs (PROGRESS_S), so that a slow-down is seen
        from the first streams it touches rather than when they end."""
        self._progress = progress
        self._progress_of = (started_at, in_flight_at_start)
        self._check_at = 0.0

    async def _read(self, budget: Budget) -> list[Event] | None:
        """One network read within `budget`, parsed and metered; None at the end of the stream."""
        try:
            with budget.timeout():
                raw = await anext(self._reads)
        except StopAsyncIteration:
            return None
        except TRANSPORT_ERRORS as exc:
            raise StreamBroken(f"upstream connection failed mid-stream: {type(exc).__name__}") from None
        now = time.perf_counter()
        meter = self.meter
        chunks: list[Event] = []
        texts: list[str] = []
        for payload in self._decoder.feed(raw):
            if payload == DONE:
                meter.done = True
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                meter.malformed += 1  # skipped and counted; the stream goes on
                continue
            if not isinstance(chunk, dict):
                meter.malformed += 1
                continue
            if "error" in chunk:
                raise _error_from_event(redact(chunk["error"], self.endpoint.provider))
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                content = delta.get("content")
                # `text`: a legacy completion's chunk; checked last, chat chunks rarely get that far
                answer = bool(content or delta.get("tool_calls") or delta.get("refusal") or choice.get("text"))
                if answer or delta.get("reasoning_content") or delta.get("reasoning"):
                    meter.token_chunks += 1
                    meter.t_last = now
                    if meter.t_first is None:
                        meter.t_first = now
                    if answer and meter.t_first_answer is None:
                        meter.t_first_answer = now
                if content and choice.get("index", 0) == 0:
                    texts.append(content)
            if chunk.get("usage"):
                meter.usage = chunk["usage"]
            chunks.append((payload, chunk))
        if texts:
            self.answer.extend(texts)  # only once the whole read is good: what the client will get
        if now >= self._check_at:
            self._report(now)
        return chunks

    def _report(self, now: float) -> None:
        t_first = self.meter.t_first
        if t_first is None or now - t_first < PROGRESS_S:
            self._check_at = (now if t_first is None else t_first) + PROGRESS_S
            return
        self._check_at = now + PROGRESS_S
        assert self._progress is not None
        self._progress(self.endpoint, self.meter, *self._progress_of)

    async def _read_whole(self, budget: Budget) -> None:
        """A JSON answer (embeddings), read to the end within `budget` and kept as one chunk. No token
        timings: only its end-to-end latency is measured."""
        raw = b""
        try:
            with budget.timeout():
                async for part in self._reads:
                    raw += part
        except TimeoutError:
            raise UpstreamTimeout(f"no answer within {budget.seconds:.1f} s") from None
        except TRANSPORT_ERRORS as exc:
            raise UpstreamError(f"upstream connection failed: {type(exc).__name__}", status=502) from None
        self._ended = self.meter.done = True
        self.meter.t_end = time.perf_counter()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = None
        if not isinstance(body, dict):
            raise UpstreamError("upstream answered with something other than a JSON object", status=502)
        if "error" in body:
            raise _error_from_event(redact(body["error"], self.endpoint.provider))
        if isinstance(body.get("usage"), dict):
            self.meter.usage = body["usage"]
        self._pending.append((raw, body))

    async def open_gate(self, budget: Budget | float) -> None:
        """Read until the first token (or the end); raise if it does not come within `budget`."""
        if not isinstance(budget, Budget):
            budget = Budget(budget, self._lag)
        if self.whole:
            await self._read_whole(budget)
            return
        while self.meter.t_first is None and not self.meter.done:
            if budget.remaining() <= 0:
                raise UpstreamTimeout(f"no first token within {budget.seconds:.1f} s")
            try:
                chunks = await self._read(budget)
            except TimeoutError:
                raise UpstreamTimeout(f"no first token within {budget.seconds:.1f} s") from None
            if chunks is None:
                self._ended = True
                break
            self._pending.extend(chunks)
        if self.meter.t_first is None and not self._pending:
            raise UpstreamError("upstream closed the stream without a response", status=502)

    async def next_batch(self) -> list[Event] | None:
        """The events of the next network read that brought any (first, those read at the gate); None
        at the end of the stream."""
        if self._pending:
            pending, self._pending = self._pending, []
            return pending
        # Read to the end even after `[DONE]`: the connection only goes back to the pool once the
        # response is fully consumed; closing it early would cost a new connection per request.
        while not self._ended:
            try:
                chunks = await self._read(Budget(self._stall_s, self._lag))
            except TimeoutError:
                message = f"upstream stalled: no data for {self._stall_s:.0f} s"
                raise StreamBroken(message, status=504) from None
            if chunks is None:
                break
            if chunks:
                return chunks
        if self.meter.t_end is None:
            self._ended = True
            self.meter.t_end = time.perf_counter()
            self.meter.settle_usage()
        return None

    async def batches(self) -> AsyncIterator[list[Event]]:
        while (chunks := await self.next_batch()) is not None:
            yield chunks

    async def aclose(self) -> None:
        if self.meter.t_end is None:
            self.meter.t_end = time.perf_counter()
        self.meter.settle_usage()
        await self._response.aclose()


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
