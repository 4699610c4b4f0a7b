"""End to end: `health.warm_up` measures each endpoint before the gateway says it is ready, so the first
burst of requests is not split onto an endpoint whose advertised speed is false.

The simulator's `liar` advertises 600 tok/s and delivers 40; `honest` delivers the 400 it advertises.
Without warm-up the first burst gives the liar its trial share (routing/speed.py); with it, /healthz
answers 503 `warming_up` until one short completion to each has been measured, and the burst then
goes where the measurements say.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
import openai

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

PROFILES = {"liar": {"tokens_per_second": 40, "ttft_ms": 2000, "tick_ms": 20},
            "honest": {"tokens_per_second": 400, "ttft_ms": 50, "tick_ms": 20}}
ROWS = [{"sim": "liar", "id": "liar", "tier": "fast", "advertised": {"tokens_per_second": 600, "ttft_ms": 50}},
        {"sim": "honest", "id": "honest", "tier": "fast", "advertised": {"tokens_per_second": 400, "ttft_ms": 50}}]
# No exploration and a fixed seed: where each request of the burst goes is the prediction's choice alone.
GATEWAY = {"explore_rate": 0, "random_seed": 1}


async def burst(base_url: str, n: int) -> list[str]:
    """`n` concurrent completions through the official SDK; the endpoint that served each."""
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0) as client:
        async def one() -> str:
            raw = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=40,
                extra_body={"provider": {"sort": "throughput"}})
            raw.parse()
            return raw.headers["x-ultraroute-endpoint"]
        return list(await asyncio.gather(*(one() for _ in range(n))))


def catalogue(sim: SimProcess, warm_up: bool) -> dict[str, Any]:
    return {**catalogue_for(sim, {"m": ROWS}, gateway=GATEWAY), "health": {"warm_up": warm_up}}


def test_warm_up_holds_readiness_until_each_endpoint_is_measured_and_the_first_burst_avoids_the_liar() -> None:
    with SimProcess(make_sim_config(PROFILES)) as sim:
        gw = GatewayProcess(catalogue(sim, warm_up=True))
        seen: list[str] = []
        retry_after: list[str | None] = []  # each 503's retry-after: asserted here, not in the watcher
        stop = threading.Event()

        def watch() -> None:  # /healthz from the moment the gateway listens until it says it is ready
            while not stop.is_set():
                try:
                    r = httpx.get(f"{gw.url}/healthz", timeout=0.5)
                    seen.append(r.json()["status"])
                    if r.status_code == 200:
                        return
                    if r.status_code == 503:
                        retry_after.append(r.headers.get("retry-after"))
                except httpx.HTTPError:
                    pass
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            with gw:
                # Ready now. The watcher stops at its own next look, which sees it: stopping it from
                # here could leave its last look (a few ms before ready) the last one seen.
                watcher.join(timeout=5)
                stop.set()
                assert not watcher.is_alive(), "the watcher never saw the gateway ready"
                assert retry_after and set(retry_after) == {"1"}, retry_after
                # The liar's warm-up completion takes at least its 2 s TTFT: readiness waited for it.
                assert "warming_up" in seen and seen[-1] == "ok", seen[-20:]
                assert seen.index("ok") > seen.index("warming_up")
                # One warm-up completion each, before any client request.
                assert [len(sim.stats(n)["attempts"]) for n in ("liar", "honest")] == [1, 1]
                # Measured: /v1/endpoints shows each one's decode rate (the liar's is its true 40 tok/s).
                rows = {r["id"]: r["stats"] for r in httpx.get(f"{gw.base_url}/endpoints", timeout=5).json()["data"]}
                # Honest's one short completion reads below its 400 when the other xdist worker keeps both
                # cores busy (seen: 139, 273); 150 still sets it apart from the liar's 40.
                assert rows["liar"]["decode_tps"]["p50"] < 60 < 150 < rows["honest"]["decode_tps"]["p50"], rows
                served = asyncio.run(burst(gw.base_url, 8))
                assert served == ["honest"] * 8, served
                assert gw.logs().count('"probe":true') == 2
        finally:
            stop.set()


def test_without_warm_up_the_first_burst_gives_the_unmeasured_liar_its_trial_share() -> None:
    """The control: the same burst on a gateway that starts cold. Shows what the test above guards."""
    with SimProcess(make_sim_config(PROFILES)) as sim, GatewayProcess(catalogue(sim, warm_up=False)) as gw:
        assert [len(sim.stats(n)["attempts"]) for n in ("liar", "honest")] == [0, 0]
        served = asyncio.run(burst(gw.base_url, 8))
        assert served.count("liar") >= 2, served

