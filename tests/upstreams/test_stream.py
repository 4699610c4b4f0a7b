"""`upstream_stream.UpstreamStream`: the first-token gate and the batches after it, from a scripted response.

The response is a fake at the `UpstreamResponse` seam whose body arrives as the given network reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import orjson
import pytest

from gateway.config import Endpoint, build_catalogue, parse_catalogue
from gateway.errors import UpstreamError
from gateway.upstreams.stream import Meter, StreamBroken, UpstreamStream


class ScriptedResponse:
    """A 200 whose body arrives as `reads`, one network read each."""

    def __init__(self, *reads: bytes) -> None:
        self.status_code = 200
        self.headers: Mapping[str, str] = {}
        self._reads = reads

    async def _body(self) -> AsyncIterator[bytes]:
        for read in self._reads:
            yield read

    def aiter_raw(self) -> AsyncIterator[bytes]:
        return self._body()

    async def aread(self) -> bytes:
        return b"".join(self._reads)

    async def aclose(self) -> None:
        return None


def event(payload: dict[str, Any] | str) -> bytes:
    return b"data: " + (payload.encode() if isinstance(payload, str) else orjson.dumps(payload)) + b"\n\n"


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    return event({"id": "c1", "object": "chat.completion.chunk", "model": "up",
                  "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra})


@pytest.fixture
def endpoint() -> Endpoint:
    data = {"providers": {"p": {"base_url": "http://p.test/v1"}},
            "models": {"m": {"endpoints": [{"provider": "p", "model": "up", "id": "p/e",
                                                 "price": {"input": 1, "output": 2}}]}}}
    return build_catalogue(parse_catalogue(data, "t.yaml"), "t.yaml", env={}).endpoints()[0]


def stream_of(endpoint: Endpoint, *reads: bytes) -> UpstreamStream:
    return UpstreamStream(endpoint, ScriptedResponse(*reads), Meter(t_sent=time.perf_counter()), stall_s=5.0,
                          first_token_early=True)


async def test_the_first_token_is_handed_on_before_the_rest_of_its_read_is_parsed(endpoint: Endpoint) -> None:
    # One network read holding a whole answer, as a fast provider (or a short answer) sends it.
    read = b"".join([chunk({"role": "assistant", "content": ""}), chunk({"content": "a"}), chunk({"content": "b"}),
                     chunk({"content": "c"}), chunk({}, "stop"),
                     event({"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}}),
                     event("[DONE]")])
    stream = stream_of(endpoint, read)
    await stream.open_gate(5.0)
    first = await stream.next_batch()
    assert first is not None
    assert [c["choices"][0]["delta"] for _, c in first] == [{"role": "assistant", "content": ""}, {"content": "a"}]
    assert stream.answer == ["a"]
    rest = await stream.next_batch()
    assert rest is not None and len(rest) == 4  # b, c, the finish chunk, the usage chunk
    assert await stream.next_batch() is None
    meter = stream.meter
    # Parsed later, metered as what it is: tokens of the read that arrived at the first token's time.
    assert meter.token_chunks == 3 and meter.t_last == meter.t_first == meter.t_first_answer
    assert meter.usage == {"prompt_tokens": 3, "completion_tokens": 3} and meter.done
    assert stream.answer == ["a", "b", "c"]


async def test_the_chunks_of_the_first_read_are_counted_as_arriving_together(endpoint: Endpoint) -> None:
    # The first read brings three token chunks (the gateway read late), the next two one each: the
    # decode rate is then judged on the two after the first read (meter.py), also when the first
    # read's tail is parsed after its first token was handed on.
    first = chunk({"content": "a"}) + chunk({"content": "b"}) + chunk({"content": "c"})
    stream = stream_of(endpoint, first, chunk({"content": "d"}), chunk({"content": "e"}), event("[DONE]"))
    await stream.open_gate(5.0)
    while await stream.next_batch() is not None:
        pass
    assert stream.meter.token_chunks == 5 and stream.meter.first_chunks == 3


async def test_an_error_event_in_the_read_of_the_first_token_still_fails_the_gate(endpoint: Endpoint) -> None:
    # Nothing has been sent yet, so the dispatcher can still fall over to another endpoint.
    read = chunk({"content": "a"}) + event({"error": {"message": "overloaded", "code": 503}})
    with pytest.raises(UpstreamError, match="overloaded"):
        await stream_of(endpoint, read).open_gate(5.0)


async def test_reads_after_the_gate_are_batches_of_their_own(endpoint: Endpoint) -> None:
    stream = stream_of(endpoint, chunk({"content": "a"}), chunk({"content": "b"}) + chunk({"content": "c"}),
                       event("[DONE]"))
    await stream.open_gate(5.0)
    batches = []
    while (batch := await stream.next_batch()) is not None:
        batches.append([c["choices"][0]["delta"]["content"] for _, c in batch])
    assert batches == [["a"], ["b", "c"]]
    assert stream.meter.token_chunks == 3 and stream.meter.t_last > stream.meter.t_first


async def test_for_a_json_client_the_gate_parses_the_whole_read(endpoint: Endpoint) -> None:
    # It waits for every event anyway: stopping at the first token would only cost another batch.
    stream = UpstreamStream(endpoint, ScriptedResponse(chunk({"content": "a"}) + chunk({"content": "b"})),
                            Meter(t_sent=time.perf_counter()), stall_s=5.0)
    await stream.open_gate(5.0)
    first = await stream.next_batch()
    assert first is not None and len(first) == 2 and stream.answer == ["a", "b"]


class ReadyResponse(ScriptedResponse):
    """A response that can say what a read would bring without waiting (`read_now()`, as aiohttp's
    does): the first `ready` reads have arrived; the rest only come when awaited."""

    def __init__(self, *reads: bytes, ready: int) -> None:
        super().__init__(*reads)
        self._arrived = list(reads[:ready])
        self._later = reads[ready:]

    def read_now(self) -> bytes | None:
        if self._arrived:
            return self._arrived.pop(0)
        return b"" if not self._later else None

    async def _body(self) -> AsyncIterator[bytes]:
        while self._later:
            read, self._later = self._later[0], self._later[1:]
            await asyncio.sleep(0.01)
            yield read


async def test_reads_that_have_arrived_set_no_timer_and_a_read_that_waits_does(
        endpoint: Endpoint, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fast provider's answer often arrives with its head: reading it needs no stall timer (a timer
    started and cancelled per read was ~2% of a JSON request). A read that must wait is timed."""
    loop = asyncio.get_running_loop()
    timers: list[float] = []
    call_later = loop.call_later

    def counting_call_later(delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        if delay > 1.0:  # a stall timer (5 s), not the fake's own 10 ms sleep
            timers.append(delay)
        return call_later(delay, callback, *args)

    response = ReadyResponse(chunk({"content": "a"}), chunk({"content": "b"}), chunk({"content": "c"}),
                             event("[DONE]"), ready=2)
    stream = UpstreamStream(endpoint, response, Meter(t_sent=time.perf_counter()), stall_s=5.0)
    monkeypatch.setattr(loop, "call_later", counting_call_later)
    await stream.open_gate(5.0)
    assert await stream.next_batch() is not None and timers == []  # "a", then "b": both had arrived
    assert await stream.next_batch() is not None and timers == []
    assert await stream.next_batch() is not None and len(timers) == 1  # "c" was awaited, within the stall
    assert await stream.next_batch() is None
    assert stream.answer == ["a", "b", "c"] and stream.meter.done


async def test_a_read_that_waits_past_the_stall_breaks_the_stream(endpoint: Endpoint) -> None:
    response = ReadyResponse(chunk({"content": "a"}), chunk({"content": "b"}), ready=1)
    stream = UpstreamStream(endpoint, response, Meter(t_sent=time.perf_counter()), stall_s=0.001)
    await stream.open_gate(5.0)
    assert await stream.next_batch() is not None
    with pytest.raises(StreamBroken, match="stalled"):
        await stream.next_batch()


class StalledLag:
    """A LoopLag whose total grows by `step` at every look: a loop that lags as the stream is read."""

    loop = None  # (budgets then use the running loop's clock)

    def __init__(self, step: float) -> None:
        self.seen, self.step = 0.0, step

    def total(self) -> float:
        self.seen += self.step
        return self.seen


async def test_the_loops_lag_when_the_first_token_was_read_is_kept(endpoint: Endpoint) -> None:
    lag = StalledLag(0.25)
    meter = Meter(t_sent=time.perf_counter(), lag_at_sent=lag.total())
    stream = UpstreamStream(endpoint, ScriptedResponse(chunk({"content": "a"}), chunk({"content": "b"})), meter,
                            stall_s=5.0, lag=lag)  # type: ignore[arg-type]
    await stream.open_gate(5.0)
    assert meter.lag_at_sent == 0.25 and meter.lag_at_first is not None and meter.lag_at_first > meter.lag_at_sent
    first = meter.lag_at_first
    while await stream.next_batch() is not None:
        pass
    assert meter.lag_at_first == first  # the first token's, not a later read's
