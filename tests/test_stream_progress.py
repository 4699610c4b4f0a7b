"""A running stream's progress: the relay reports its decode rate while it runs (relay.PROGRESS_S), and
the recorder hands the router that rate in tokens (routing/speed.py decides what it means)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest

from gateway.config import Endpoint
from gateway.health.board import HealthBoard
from gateway.record import Recorder
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import Outcome
from gateway.upstreams.stream import FIRST_PROGRESS_S, PROGRESS_MIN_CHUNKS, PROGRESS_S, Meter, UpstreamStream
from tests.routing.helpers import catalogue, endpoint


def chunk(text: str) -> bytes:
    return b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + b"\n\n"


class Paced:
    """A 200 response whose body is `n` one-token chunks, `every_s` apart."""

    status_code = 200
    headers: Mapping[str, str] = {}

    def __init__(self, n: int, every_s: float) -> None:
        self.n, self.every_s = n, every_s

    async def aiter_raw(self) -> AsyncIterator[bytes]:
        for i in range(self.n):
            if i:
                await asyncio.sleep(self.every_s)
            yield chunk("t")
        yield b"data: [DONE]\n\n"

    async def aread(self) -> bytes:
        return b""

    async def aclose(self) -> None:
        pass


def _endpoint(tmp_path: Path) -> Endpoint:
    return catalogue(tmp_path, [endpoint("a")]).models["m"][0]


async def test_a_watched_stream_reports_its_rate_while_it_runs(tmp_path: Path) -> None:
    reports: list[tuple[float, int, float, int]] = []

    def progress(ep: Endpoint, meter: Meter, started_at: float, in_flight: int) -> None:
        assert meter.t_first is not None
        reports.append((time.perf_counter() - meter.t_first, meter.token_chunks, started_at, in_flight))

    stream = UpstreamStream(_endpoint(tmp_path), Paced(16, 0.1), Meter(t_sent=time.perf_counter()), 5.0)
    await stream.open_gate(5.0)
    stream.watch(progress, 123.0, 4)
    async for _ in stream.batches():
        pass
    # 1.5 s of decode: reported after the first PROGRESS_S, while tokens were still coming, and again.
    assert 2 <= len(reports) <= 1.5 / PROGRESS_S + 1, reports
    first_after, chunks, started_at, in_flight = reports[0]
    assert PROGRESS_S <= first_after < PROGRESS_S + 0.5 and 2 <= chunks < 16, reports
    assert (started_at, in_flight) == (123.0, 4)
    unwatched = UpstreamStream(_endpoint(tmp_path), Paced(8, 0.1), Meter(t_sent=time.perf_counter()), 5.0)
    await unwatched.open_gate(5.0)
    async for _ in unwatched.batches():
        pass  # no hook: nothing to call, nothing raised


class Router:
    def __init__(self) -> None:
        self.progressed: list[tuple[str, float, float, float]] = []

    def progress(self, key: str, load: float, decode_tps: float, sent_at: float) -> None:
        self.progressed.append((key, load, decode_tps, sent_at))

    def observe(self, *args: Any, **kwargs: Any) -> None:
        pass


def test_the_recorder_reports_tokens_not_chunks(tmp_path: Path) -> None:
    ep = _endpoint(tmp_path)
    store, router = MemoryStore(), Router()
    recorder = Recorder(store, router, HealthBoard())  # type: ignore[arg-type]
    # This endpoint sends two tokens a chunk: 20 tokens in 10 chunks, said its usage.
    done = Meter(t_sent=0.0, t_first=0.1, t_last=1.0, t_end=1.0, token_chunks=10,
                 usage={"prompt_tokens": 1, "completion_tokens": 20})
    recorder.begin(ep)
    recorder.record(ep, done, Outcome.OK, 200, 100.0, 0)
    running = Meter(t_sent=0.0, t_first=0.1, t_last=1.1, token_chunks=11)
    recorder.begin(ep)
    recorder.progress(ep, running, 200.0, 0)
    assert router.progressed == [(ep.key, 0.0, 20.0, 200.0)]  # 10 chunks/s, two tokens each
    recorder.progress(ep, Meter(t_sent=0.0, t_first=0.1, t_last=0.2, token_chunks=3), 200.0, 0)
    assert len(router.progressed) == 1  # too few chunks to judge a rate by


class Lag:
    """A LoopLag whose total the test sets."""

    def __init__(self) -> None:
        self.lagged = 0.0

    def total(self) -> float:
        return self.lagged


def _lagged(tmp_path: Path, t_first: float) -> tuple[Endpoint, Router, Lag, Recorder, Meter]:
    """A recorder on a loop whose lag the test sets (5 s so far), and an attempt it sent then, begun:
    its first token at `t_first`, 11 chunks by 1 s after it."""
    ep, router, lag = _endpoint(tmp_path), Router(), Lag()
    recorder = Recorder(MemoryStore(), router, HealthBoard(), lag=lag)  # type: ignore[arg-type]
    lag.lagged = 5.0
    meter = Meter(t_sent=0.0, t_first=t_first, t_last=t_first + 1.0, token_chunks=11, lag_at_sent=recorder.lag_now())
    recorder.begin(ep)
    return ep, router, lag, recorder, meter


def test_a_rate_read_through_a_stall_of_the_gateways_loop_is_not_reported_nor_a_surprise(tmp_path: Path) -> None:
    ep, router, lag, recorder, meter = _lagged(tmp_path, t_first=0.1)
    lag.lagged += 0.01  # a busy loop: 10 ms late over a second of decode
    recorder.progress(ep, meter, 200.0, 0)
    assert [rate for _, _, rate, _ in router.progressed] == [10.0]
    lag.lagged += 0.5  # then half a second of stall: the rate so far is the gateway's
    recorder.progress(ep, meter, 200.0, 0)
    assert len(router.progressed) == 1
    meter.t_end = 1.2
    sample = recorder.record(ep, meter, Outcome.OK, 200, 200.0, 0)
    assert sample.loop_lag_s == pytest.approx(0.51)  # kept: the router judges it (sample.stalled)


async def test_the_first_report_comes_early_once_enough_chunks_span_it(tmp_path: Path) -> None:
    reports: list[tuple[float, int]] = []

    def progress(ep: Endpoint, meter: Meter, started_at: float, in_flight: int) -> None:
        assert meter.t_first is not None
        reports.append((time.perf_counter() - meter.t_first, meter.token_chunks))

    # 50 chunks/s (or fewer, on a busy machine): FIRST_PROGRESS_S after the first token fewer than 8
    # chunks have come, so the first report comes with the 8th -- not with the 13th, at PROGRESS_S: a
    # slowed tier is seen that much sooner.
    stream = UpstreamStream(_endpoint(tmp_path), Paced(30, 0.02), Meter(t_sent=time.perf_counter()), 5.0)
    await stream.open_gate(5.0)
    stream.watch(progress, 123.0, 4)
    async for _ in stream.batches():
        pass
    first_after, chunks = reports[0]
    assert first_after >= FIRST_PROGRESS_S and chunks == PROGRESS_MIN_CHUNKS, reports


def test_the_lag_while_waiting_for_the_first_token_is_the_ttfts_alone(tmp_path: Path) -> None:
    ep, router, lag, recorder, meter = _lagged(tmp_path, t_first=0.4)
    lag.lagged += 0.3  # the first token read 300 ms late: the gateway's stall, most of a 400 ms TTFT
    meter.lag_at_first = lag.total()
    recorder.progress(ep, meter, 200.0, 0)
    assert [rate for _, _, rate, _ in router.progressed] == [pytest.approx(10.0)]  # the decode since: clean
    meter.t_end = 1.5
    sample = recorder.record(ep, meter, Outcome.OK, 200, 200.0, 0)
    assert sample.ttft_lag_s == pytest.approx(0.3) and sample.loop_lag_s == pytest.approx(0.3)
    assert sample.ttft_s == pytest.approx(0.4) and sample.fitted_ttft_s is None
