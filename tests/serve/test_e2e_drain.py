"""SIGTERM drains the gateway: streams in flight finish, new requests get a clean 503, exit status 0.

A real gateway process in front of the simulator; the official OpenAI SDK holds 20 streams open
(each ~6 s long) when SIGTERM arrives. While they finish, `/healthz` says 503, a new request on a
kept-alive connection gets 503 `shutting_down` with `retry-after` and `connection: close` (the
listener is still open: not a refused connection), and no stream is cut short. Then the process
exits 0. A second test gives the streams less grace than they need: they end with an SSE error
event naming the shutdown, not a silent truncation.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import httpx
import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

STREAMS = 20
TOKENS = 60
SLOW = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 10, "output_tokens": TOKENS, "tick_ms": 100,
        "slowdown_per_user": 0}
USER = [{"role": "user", "content": "Tell me a story."}]


def _gateway(sim: SimProcess, **gateway: Any) -> GatewayProcess:
    return GatewayProcess(catalogue_for(sim, {"m": [{"sim": "a"}]}, gateway=gateway))


async def _open_streams(gw: GatewayProcess, n: int) -> tuple[list[Any], list[asyncio.Task[list[str]]]]:
    """`n` streams, each read in its own task once its first chunk has arrived."""
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key="unused", max_retries=0,
                                http_client=httpx.AsyncClient(limits=httpx.Limits(max_connections=n + 5),
                                                              timeout=60))
    streams = await asyncio.gather(*(client.chat.completions.create(model="m", messages=USER, stream=True)
                                     for _ in range(n)))
    firsts = await asyncio.gather(*(anext(aiter(s)) for s in streams))

    async def rest(stream: Any, first: Any) -> list[str]:
        pieces = [c.choices[0].delta.content or "" for c in [first] if c.choices]
        finish = None
        async for chunk in stream:
            if chunk.choices:
                pieces.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
        return [*pieces, f"finish={finish}"]

    return streams, [asyncio.create_task(rest(s, f)) for s, f in zip(streams, firsts, strict=True)]


def _sigterm(gw: GatewayProcess) -> None:
    assert gw.proc is not None
    gw.proc.send_signal(signal.SIGTERM)


def test_sigterm_during_open_streams_loses_none_and_exits_zero() -> None:
    with SimProcess(make_sim_config({"a": SLOW})) as sim:
        gw = _gateway(sim, shutdown_grace_s=30).start()
        try:
            keep_alive = httpx.Client(base_url=gw.url, timeout=60)
            assert keep_alive.get("/healthz").status_code == 200  # this connection stays open

            async def scenario() -> list[list[str]]:
                _, readers = await _open_streams(gw, STREAMS)
                _sigterm(gw)
                await asyncio.sleep(0.3)  # the signal handler runs on the gateway's loop
                health = keep_alive.get("/healthz")
                refused = keep_alive.post("/v1/chat/completions", json={"model": "m", "messages": USER})
                fresh = httpx.post(f"{gw.base_url}/chat/completions", json={"model": "m", "messages": USER},
                                   timeout=60)
                assert health.status_code == 503 and health.json()["status"] == "draining"
                for r in (refused, fresh):
                    assert r.status_code == 503, r.text
                    assert r.json()["error"]["code"] == "shutting_down"
                    assert int(r.headers["retry-after"]) >= 1
                    assert r.headers["connection"] == "close"
                assert all(not t.done() for t in readers)  # all 20 still streaming while we checked
                return await asyncio.gather(*readers)

            results = asyncio.run(scenario())
            assert gw.proc is not None
            status = gw.proc.wait(timeout=30)
        finally:
            gw.stop()
        stats = sim.stats("a")
    assert status == 0, gw.logs()[-3000:]
    for pieces in results:  # every stream ran to its natural end
        assert pieces[-1] == "finish=stop", pieces
        assert len("".join(pieces[:-1]).split()) >= TOKENS - 2, pieces
    assert stats["requests"] == STREAMS, stats  # the refused requests never reached the provider
    assert "Traceback" not in gw.logs()


def test_streams_beyond_the_grace_end_with_an_error_event() -> None:
    with SimProcess(make_sim_config({"a": SLOW})) as sim:
        gw = _gateway(sim, shutdown_grace_s=1).start()
        try:
            async def scenario() -> list[BaseException | list[str]]:
                _, readers = await _open_streams(gw, 3)
                started = time.monotonic()
                _sigterm(gw)
                outcomes = await asyncio.gather(*readers, return_exceptions=True)
                assert time.monotonic() - started < 4.5  # cut after ~1 s, not run to the end (~6 s)
                return outcomes

            outcomes = asyncio.run(scenario())
            assert gw.proc is not None
            status = gw.proc.wait(timeout=30)
        finally:
            gw.stop()
    assert status == 0, gw.logs()[-3000:]
    for outcome in outcomes:
        assert isinstance(outcome, openai.APIError), outcome
        assert "shut down before the stream finished" in str(outcome), outcome
    logs = gw.logs()
    assert "ended 3 request(s)" in logs and "Traceback" not in logs, logs[-3000:]


if __name__ == "__main__":
    pytest.main([__file__, "-q"])


def test_shutdown_delay_keeps_refusing_for_that_long_with_nothing_in_flight() -> None:
    """`shutdown_delay_s`: with nothing in flight, SIGTERM still answers 503 for at least that long (for
    load balancers slow to stop sending), then exits 0. Counted in answers: without the delay the
    process is gone after its first few. Judged by when the last refusal came, not by how many: each look
    is a new connection, which on a busy machine can take a good part of the 100 ms between looks."""
    delay_s = 2.0
    with SimProcess(make_sim_config({"a": SLOW})) as sim:
        gw = _gateway(sim, shutdown_delay_s=delay_s).start()
        try:
            client = httpx.Client(base_url=gw.url, timeout=5)
            assert client.get("/healthz").status_code == 200
            _sigterm(gw)
            signalled = time.monotonic()
            statuses: list[int] = []
            refused_at: list[float] = []  # seconds after the signal
            assert gw.proc is not None
            while gw.proc.poll() is None:
                try:
                    statuses.append(httpx.get(f"{gw.url}/healthz", timeout=2).status_code)
                    if statuses[-1] == 503:
                        refused_at.append(time.monotonic() - signalled)
                except httpx.HTTPError:
                    break  # the listener is closed: the process is on its way out
                time.sleep(0.1)
            status = gw.proc.wait(timeout=30)
            lasted = time.monotonic() - signalled
        finally:
            gw.stop()
    assert status == 0, gw.logs()[-3000:]
    assert lasted >= delay_s  # a lower bound: a busy machine only makes it longer
    refusing = statuses[statuses.index(503):] if 503 in statuses else []  # (a look may beat the signal)
    assert set(refusing) == {503} and len(refusing) >= 3, statuses  # all refused, from the first to the last
    # still refusing near the delay's end (without it the last refusal is ~0.1 s after the signal)
    assert refused_at[-1] >= delay_s - 0.5, (refused_at, statuses)
