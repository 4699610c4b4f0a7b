"""Reading one upstream SSE stream: the first-token gate, the batches after it, and their timings.

`UpstreamStream` wraps one opened upstream response. `open_gate()` reads until the first token (the
first-chunk gate: until then nothing has been sent to the client, so the dispatcher may still fail
over). `next_batch()` then returns the events of each network read -- each as its raw `data:` payload
and its parsed chunk -- timing them in a `Meter`: time to first token, time to first answer token,
last token, token counts and `usage`. For a streaming client the gate stops parsing at the first
token, which is handed on before the rest of its read is parsed.

When the upstream sent no usage (llama.cpp's server ignores `stream_options.include_usage`, and a
stream that breaks mid-way never gets to its usage), the meter estimates it at the end
(`Meter.settle_usage`): output tokens from the token chunks relayed, times the tokens per chunk the
endpoint's earlier answers showed (1 until one sent usage: some hosts pack several tokens in a chunk),
input tokens from the request's size; the usage object then says `"estimated": true`, a streaming
client that asked for usage still gets its usage chunk, and cost and budgets use the figure.
How the batches reach the client is relay.py's business.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from gateway.config import Endpoint
from gateway.errors import GatewayError, UpstreamError, UpstreamTimeout
from gateway.serve.lag import Budget, LoopLag
from gateway.upstreams.client import TRANSPORT_ERRORS, UpstreamResponse, redact
from gateway.upstreams.limit_headers import Reported
from gateway.upstreams.meter import Meter
from gateway.upstreams.sse import DONE, SSEDecoder
from gateway.upstreams.text_runs import text_run, with_text
from gateway.upstreams.wire import END, Chunk, Translator


class StreamBroken(UpstreamError):
    """The upstream failed after its first token: a read error, a stall, or an error event."""

    def __init__(self, message: str, status: int = 502, body: dict[str, Any] | None = None) -> None:
        super().__init__(message, status=status, body=body)
        self.metric_label = "stream_broken"


Event = tuple[bytes, dict[str, Any]]  # one SSE `data:` payload as received, and its parsed chunk
# Told a running stream's progress (the recorder's `progress`): endpoint, meter, sent at, in flight then.
Progress = Callable[[Endpoint, Meter, float, int], None]
# A running stream's decode rate is reported once it spans PROGRESS_MIN_CHUNKS token chunks and at least
# FIRST_PROGRESS_S after its first token, then every PROGRESS_S: the first report is what shows a tier
# that slowed down, and every request sent there until then is served slowly.
PROGRESS_S = 0.25
FIRST_PROGRESS_S = 0.1
PROGRESS_MIN_CHUNKS = 8  # a rate is judged over at least this many chunks


def _error_from_event(error: Any) -> UpstreamError:
    body = error if isinstance(error, dict) else {"message": str(error)}
    code = body.get("code")
    status = code if isinstance(code, int) and 400 <= code < 600 else 502
    return UpstreamError(str(body.get("message") or "upstream error event"), status=status, body=body)


_ANSWER, _REASONING = "answer", "reasoning"
_ERROR_KEY = b'"error"'


def _token_kind(choice: dict[str, Any], delta: dict[str, Any] | None) -> str | None:
    """Whether a choice without content is a token: an answer (tool calls, a refusal, a legacy
    completion's `text`), reasoning, or neither (a role or finish chunk)."""
    if delta and (delta.get("tool_calls") or delta.get("refusal")):
        return _ANSWER
    if choice.get("text"):  # a legacy completion's chunk
        return _ANSWER
    if delta and (delta.get("reasoning_content") or delta.get("reasoning")):
        return _REASONING
    return None


class UpstreamStream:
    native: Any = None  # a pass-through translator (upstreams/passthrough.py): the client gets its events

    def __init__(self, endpoint: Endpoint, response: UpstreamResponse, meter: Meter, stall_s: float,
                 lag: LoopLag | None = None, whole: bool = False, first_token_early: bool = False,
                 joins_text: bool = False) -> None:
        self.endpoint = endpoint
        self._lag = lag  # the loop's own lag does not count against the stall timeout
        self.whole = whole  # one JSON answer, not SSE (embeddings): read whole at the gate
        self.meter = meter
        self._response = response
        self._reads = response.aiter_raw()
        # An aiohttp response can say what a read would bring without waiting (`read_now()`).
        self._read_now: Callable[[], bytes | None] | None = getattr(response, "read_now", None)
        self._decoder = SSEDecoder()
        self._stall_s = stall_s
        self._pending: list[Event] = []
        # For a streaming client (`first_token_early`): the rest of the read that brought the first
        # token, parsed only after the gate has opened, so the first token reaches the client without
        # waiting for the parse of the read's other events. (A JSON client waits for all of them.)
        self._early = first_token_early
        self._unparsed: list[bytes] = []
        # For a client that did not stream (`joins_text`): runs of text chunks of one read come as one
        # chunk with their joined text, decoded in one call (upstreams/text_runs.py).
        self._joins_text = joins_text
        self._unparsed_at = 0.0  # when that read arrived: the time its tokens are metered at
        self.answer: list[str] = []  # choice 0's content read so far: what a continuation is given
        self._ended = False
        self.failure: GatewayError | None = None  # set when the stream broke after the gate
        self.reported: Reported | None = None  # what its headers said of the provider's rate limits
        self._progress: Progress | None = None
        self._progress_of: tuple[float, int] = (0.0, 0)  # sent at (wall clock), in flight then
        self._check_at = float("inf")  # perf_counter time of the next progress report
        self._tier: str | None = None

    @property
    def served_tier(self) -> str | None:
        """The tier the provider says served (OpenAI's `service_tier` on its chunks), if it says."""
        return self._tier

    def watch(self, progress: Progress, started_at: float, in_flight_at_start: int) -> None:
        """Report the decode rate while the stream runs (PROGRESS_S), so that a slow-down is seen
        from the first streams it touches rather than when they end."""
        self._progress = progress
        self._progress_of = (started_at, in_flight_at_start)
        self._check_at = 0.0

    async def _read(self, budget: Budget | float, gate: bool = False) -> list[Event] | None:
        """One network read within `budget` (seconds from now, or a `Budget`), parsed and metered; None
        at the end of the stream. At the `gate` of a streaming client's stream, parsing stops after
        the first token."""
        try:
            # Bytes that are already here need no timer (on a fast upstream, most reads of a JSON
            # client's answer: its body and its end arrive with the head).
            raw = self._read_now() if self._read_now is not None else None
            if raw is None:
                if not isinstance(budget, Budget):
                    budget = Budget(budget, self._lag)
                with budget.timeout():
                    raw = await anext(self._reads)
            elif not raw:
                return None
        except StopAsyncIteration:
            return None
        except TRANSPORT_ERRORS as exc:
            raise StreamBroken(f"upstream connection failed mid-stream: {type(exc).__name__}") from None
        # An error event must still fail the attempt before anything is sent (the dispatcher then
        # falls over): a read that may hold one is parsed whole at the gate, as any other read is.
        defer = gate and self._early and _ERROR_KEY not in raw
        return self._parse(self._decoder.feed(raw), time.perf_counter(), defer)

    def _parse(self, payloads: list[bytes], now: float, defer: bool = False) -> list[Event]:
        """The events of one read (arrived at `now`), metered; with `defer`, parsing stops after the
        first token and the rest waits in `_unparsed`."""
        meter = self.meter
        chunks: list[Event] = []
        texts: list[str] = []
        tokens = 0  # token chunks in this read (reasoning included)
        answered = False  # one of them was answer (not reasoning)
        i = 0
        while i < len(payloads):
            payload = payloads[i]
            i += 1
            if payload == DONE:
                meter.done = True
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                meter.malformed += 1  # skipped and counted; the stream goes on
                continue
            if type(chunk) is not dict:
                meter.malformed += 1
                continue
            if "error" in chunk:
                raise _error_from_event(redact(chunk["error"], self.endpoint.provider))
            content = None
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta")
                content = delta.get("content") if delta else None
                if content:  # the common chunk: answer text
                    tokens += 1
                    answered = True
                    if choice.get("index", 0) == 0:
                        texts.append(content)
                    continue
                kind = _token_kind(choice, delta)
                if kind:
                    tokens += 1
                    answered = answered or kind is _ANSWER
            if chunk.get("usage"):
                meter.usage = chunk["usage"]
            chunks.append((payload, chunk))
            if defer and tokens:
                self._unparsed, self._unparsed_at = payloads[i:], now
                break
            if content and self._joins_text and i < len(payloads):
                run = text_run(payloads, i, payload, chunk)
                if run is None:  # none here: most likely none in this stream, and trying costs
                    self._joins_text = False
                    continue
                i += run.count
                tokens += run.count
                texts.append(run.text)
                chunks.append((b"", with_text(chunk, run.text)))  # the payload is not kept: nobody relays it
        self._metered(tokens, answered, texts, now)
        return chunks

    def _metered(self, tokens: int, answered: bool, texts: list[str], now: float) -> None:
        """What one read brought, into the meter: `tokens` token chunks (`answered`: some not
        reasoning), choice 0's `texts`, all arrived at `now`."""
        meter = self.meter
        if tokens:  # every event of one read arrived at `now`
            meter.token_chunks += tokens
            meter.t_last = now
            if meter.t_first is None:
                meter.t_first = now
                meter.first_chunks = tokens
                if self._lag is not None:  # a first token read late by a stall is no endpoint's TTFT
                    meter.lag_at_first = self._lag.total()
            elif now == meter.t_first:  # the rest of the first read, parsed after its first token (`defer`)
                meter.first_chunks += tokens
            if answered and meter.t_first_answer is None:
                meter.t_first_answer = now
        if texts:
            self.answer.extend(texts)  # only once the whole read is good: what the client will get
        if now >= self._check_at:
            self._report(now)

    def _report(self, now: float) -> None:
        meter = self.meter
        if meter.t_first is None:
            self._check_at = now + FIRST_PROGRESS_S
            return
        since = now - meter.t_first
        if since < FIRST_PROGRESS_S:
            self._check_at = meter.t_first + FIRST_PROGRESS_S
            return
        if meter.token_chunks < PROGRESS_MIN_CHUNKS and since < PROGRESS_S:
            self._check_at = now  # the first report waits for enough chunks: checked at each read till then
            return
        self._check_at = now + PROGRESS_S
        assert self._progress is not None
        self._progress(self.endpoint, meter, *self._progress_of)

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
                chunks = await self._read(budget, gate=True)
            except TimeoutError:
                raise UpstreamTimeout(f"no first token within {budget.seconds:.1f} s") from None
            if chunks is None:
                self._ended = True
                break
            self._pending.extend(chunks)
        if self.meter.t_first is None and not self._pending:
            raise UpstreamError("upstream closed the stream without a response", status=502)
        if self._pending:  # once per request: the tier is on every chunk
            tier = self._pending[0][1].get("service_tier")
            self._tier = tier if isinstance(tier, str) else None

    async def next_batch(self) -> list[Event] | None:
        """The events of the next network read that brought any (first, those read at the gate); None
        at the end of the stream."""
        if self._pending:
            pending, self._pending = self._pending, []
            return pending
        if self._unparsed:
            payloads, self._unparsed = self._unparsed, []
            chunks = self._parse(payloads, self._unparsed_at)
            if chunks:
                return chunks
        # Read to the end even after `[DONE]`: the connection only goes back to the pool once the
        # response is fully consumed; closing it early would cost a new connection per request.
        while not self._ended:
            try:
                chunks = await self._read(self._stall_s)
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


class TranslatedStream(UpstreamStream):
    """The stream of an upstream API that is not chat completions (gateway/upstreams/): each event
    is translated into the chat chunks it means before it is read as any chat stream is. A read is
    parsed whole (no early first token): the translated chunks cannot be left half-read."""

    def __init__(self, endpoint: Endpoint, response: UpstreamResponse, meter: Meter, stall_s: float,
                 lag: LoopLag | None = None, *, translator: Translator) -> None:
        super().__init__(endpoint, response, meter, stall_s, lag)
        self.translator = translator
        if getattr(translator, "passthrough", False):
            self.native = translator

    @property
    def served_tier(self) -> str | None:
        return self.translator.served_tier

    def _parse(self, payloads: list[bytes], now: float, defer: bool = False) -> list[Event]:
        """As a chat stream's, from the translator's chunks: no JSON round trip. (A pass-through
        client gets the upstream's own events: `_parse_native`.)"""
        if self.native is not None:
            return self._parse_native(payloads, now)
        meter = self.meter
        translate = self.translator.events
        out: list[Event] = []
        texts: list[str] = []
        tokens = 0
        answered = False
        for payload in payloads:
            chunks = translate(payload)
            if chunks is None:
                meter.malformed += 1
                continue
            for chunk in chunks:
                if chunk is END:
                    meter.done = True
                    continue
                kind = self._translated(chunk)
                if kind is not None:
                    tokens += 1
                    if kind is not False:
                        answered = True
                        if kind is not True:
                            texts.append(kind)
                out.append((orjson.dumps(chunk), chunk))
        self._metered(tokens, answered, texts, now)
        return out

    def _translated(self, chunk: Chunk) -> str | bool | None:
        """What one translated chunk (not `END`) is to the meter: its answer text, True for another
        answer token (a tool call's), False for reasoning, None for no token (its usage kept, an
        error raised)."""
        if "error" in chunk:
            raise _error_from_event(redact(chunk["error"], self.endpoint.provider))
        choices = chunk["choices"]
        if choices:
            delta = choices[0]["delta"]
            if delta.get("content"):
                return delta["content"]  # type: ignore[no-any-return]
            if delta.get("tool_calls"):
                return True
            return False if delta.get("reasoning_content") else None
        if chunk.get("usage"):
            self.meter.usage = chunk["usage"]
        return None

    def _parse_native(self, payloads: list[bytes], now: float) -> list[Event]:
        """A pass-through read: the translator keeps its events for the client and counts their
        tokens (`read`); what is left for the meter is the chunks of its few other events (usage,
        the end, an error). One event stands for the read: the relay only needs to know one came."""
        meter = self.meter
        tokens, answered, chunks = self.native.read(payloads)
        for chunk in chunks:
            if chunk is None:
                meter.malformed += 1
            elif chunk is END:
                meter.done = True
            else:
                kind = self._translated(chunk)  # (a tool call's start, among them)
                if kind is not None:
                    tokens += 1
                    answered = answered or kind is not False
        self._metered(tokens, answered, (), now)
        return [(b"", {})] if tokens or chunks else []
