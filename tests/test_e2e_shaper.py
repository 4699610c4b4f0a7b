"""End to end: a provider's rate limit is paced across replicas (shaper.py) instead of answered with 429s.

Two gateway replicas share one Redis. The provider `limited` allows 60 requests per minute (the
simulator enforces it as a rate card does: a token bucket holding a minute's worth); 200 requests
in ~10 s prefer it. It must never answer 429: it is sent what its bucket allows (a minute's burst
plus one a second), the rest spills to `other`, and every request succeeds. Then priority: with one
endpoint and its bucket empty, requests wait their turn, `x-ultraroute-priority: high` first.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for
from tests.scrape import metric_value

PROFILE = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 5}


def _body(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
            "provider": {"order": ["limited", "other"]}}


async def _spread(urls: list[str], total: int, seconds: float) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30) as client:
        async def one(i: int) -> httpx.Response:
            await asyncio.sleep(i * seconds / total)
            return await client.post(urls[i % len(urls)], json=_body("m"))

        return await asyncio.gather(*(one(i) for i in range(total)))


async def _priorities(gw: GatewayProcess) -> list[str]:
    """Three lows, then -- once two of them are provably queued (the gateway's queue-depth metric says
    so) -- two highs; the priorities in the order their answers came."""
    done: list[str] = []
    url = f"{gw.base_url}/chat/completions"
    async with httpx.AsyncClient(timeout=30) as client:
        async def one(priority: str) -> int:
            r = await client.post(url, json=_body("p"), headers={"x-ultraroute-priority": priority})
            done.append(priority)
            return r.status_code

        lows = [asyncio.create_task(one("low")) for _ in range(3)]
        deadline = time.monotonic() + 10
        while metric_value((await client.get(f"{gw.url}/metrics")).text, "ultraroute_queue_depth",
                           endpoint="limited") < 2:
            assert time.monotonic() < deadline, "the lows were never queued"
            await asyncio.sleep(0.02)
        statuses = await asyncio.gather(*lows, *(one("high") for _ in range(2)))
    assert statuses == [200] * 5, statuses
    return done


def test_rate_limited_provider_is_paced_across_replicas_and_spills(server_redis_url: str) -> None:
    config = make_sim_config({"limited": {**PROFILE, "requests_per_minute": 60}, "other": dict(PROFILE)})
    with SimProcess(config) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "limited", "id": "limited"}, {"sim": "other", "id": "other"}]},
                                  gateway={"redis_key_prefix": f"shape-{uuid.uuid4().hex[:8]}"})
        catalogue["providers"]["limited"]["rate_limits"] = {"requests_per_minute": 60}
        # One Redis server: the shaper's buckets are proved on a Redis Cluster by test_shaper.py; this
        # end-to-end run is about pacing over time and costs ~14 s a run.
        env = {"REDIS_URL": server_redis_url}
        with GatewayProcess(catalogue, env=env) as a, GatewayProcess(catalogue, env=env) as b:
            started = time.monotonic()
            urls = [f"{gw.base_url}/chat/completions" for gw in (a, b)]
            responses = asyncio.run(_spread(urls, 200, 10.0))
            elapsed = time.monotonic() - started
            assert [r.status_code for r in responses] == [200] * 200
            limited, other = sim.stats("limited"), sim.stats("other")
            assert limited["outcomes"].get("rate_limited", 0) == 0, limited["outcomes"]
            # The bucket's minute of burst, then one a second: used, never beyond.
            assert 55 <= limited["requests"] <= 60 + elapsed + 1
            assert other["requests"] == 200 - limited["requests"]
            assert {r.headers["x-ultraroute-endpoint"] for r in responses} == {"limited", "other"}


def test_requests_wait_their_turn_high_priority_first() -> None:
    config = make_sim_config({"limited": {**PROFILE, "requests_per_minute": 40}})
    with SimProcess(config) as sim:
        catalogue = catalogue_for(sim, {"p": [{"sim": "limited", "id": "limited", "first_token_budget_s": 9}]})
        # One request's worth of burst: after the first request, one every 1.5 s, in priority order.
        catalogue["providers"]["limited"]["rate_limits"] = {"requests_per_minute": 40, "burst_s": 1}
        with GatewayProcess(catalogue) as gw:
            order = asyncio.run(_priorities(gw))
            assert sim.stats("limited")["outcomes"].get("rate_limited", 0) == 0
            # The first low takes the only token; the two highs, queued after the other lows, go next.
            assert order == ["low", "high", "high", "low", "low"], order
            metrics = httpx.get(f"{gw.url}/metrics").text
            assert 'ultraroute_queue_wait_seconds_count{endpoint="limited",model="p",tier="standard"} 4.0' in metrics
            assert 'ultraroute_queue_depth{endpoint="limited",model="p",tier="standard"} 0.0' in metrics
