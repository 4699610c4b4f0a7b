"""End to end under load: 1000 concurrent streams with 20% injected faults.

Every request is served or gets a clear error (never a hang, never a silent truncation), and
afterwards nothing is left in flight: not at the gateway, not at the providers.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx
import orjson

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

N = 1000
FAULTS = {"error_rate": 0.05, "hang_rate": 0.05, "drop_rate": 0.05, "drop_after_tokens": 5,
          "malformed_rate": 0.05}


async def one(client: httpx.AsyncClient, body: dict[str, object]) -> str:
    """'ok', 'error-event' (a clear error mid-stream) or 'http-<status>' with an OpenAI error body."""
    async with client.stream("POST", "/chat/completions", json=body) as r:
        raw = await r.aread()
    if r.status_code != 200:
        assert set(orjson.loads(raw)["error"]) >= {"message", "type", "code", "param"}
        return f"http-{r.status_code}"
    if raw.endswith(b"data: [DONE]\n\n"):
        return "ok"
    last = raw.strip().split(b"\n\n")[-1]
    assert last.startswith(b"data: {\"error\""), raw[-300:]  # never a truncation that looks finished
    return "error-event"


async def storm(base_url: str) -> Counter[str]:
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "stream": True, "speed": "fast"}
    # Many small client pools: one httpx pool of 1000 connections would cost the test client O(n^2).
    clients = [httpx.AsyncClient(base_url=base_url, timeout=60, limits=httpx.Limits(max_connections=25))
               for _ in range(N // 25)]
    try:
        return Counter(await asyncio.gather(*(one(clients[i % len(clients)], body) for i in range(N))))
    finally:
        for client in clients:
            await client.aclose()


def test_thousand_streams_with_faults() -> None:
    profile = {"ttft_ms": 100, "tokens_per_second": 200, "output_tokens": 20, "tick_ms": 50, "capacity": 2000,
               "faults": FAULTS}
    config = make_sim_config({"fast": dict(profile), "std": dict(profile)})
    with SimProcess(config) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "fast", "id": "fast", "tier": "fast", "first_token_budget_s": 3},
                                              {"sim": "std", "id": "std", "first_token_budget_s": 3}]},
                                  gateway={"breaker_failures": 10_000})
        with GatewayProcess(catalogue) as gw:
            start = time.monotonic()
            outcomes = asyncio.run(storm(gw.base_url))
            took = time.monotonic() - start
            assert sum(outcomes.values()) == N and took < 90, (outcomes, took)
            assert outcomes["ok"] >= 0.75 * N, outcomes  # most faults before the first token fail over
            assert set(outcomes) <= {"ok", "error-event", "http-502", "http-503", "http-504"}, outcomes

            def idle() -> bool:
                view = httpx.get(f"{gw.url}/v1/endpoints").json()["data"]
                return all(row["stats"]["in_flight"] == 0 for row in view) and \
                    all(sim.stats(name)["active"] == 0 for name in ("fast", "std"))

            deadline = time.monotonic() + 10
            while not idle():
                assert time.monotonic() < deadline, "connections still busy after the storm"
                time.sleep(0.2)
