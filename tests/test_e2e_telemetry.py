"""End to end: live endpoint telemetry through gateway processes, shared by a real Redis.

Issue "Live endpoint telemetry": reported p50 decode rate and TTFT match known simulator profiles;
two replicas share what they measure; a Redis restart costs no request and sharing resumes; Redis
writes scale with flush intervals, not with requests.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import redis

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.conftest import PrivateRedis
from tests.harness import GatewayProcess, catalogue_for, together
from tests.test_e2e_routing import burst, served

USER = [{"role": "user", "content": "Explain this stack trace."}]
PROFILES = {  # name: (decode tok/s, TTFT ms)
    "tps70": (70, 1500), "tps150": (150, 800), "tps400": (400, 400), "tps1000": (1000, 200),
}


def endpoints_view(gw: GatewayProcess, window_s: int = 300) -> dict[str, dict[str, Any]]:
    data = httpx.get(f"{gw.url}/v1/endpoints", params={"window_s": window_s}).json()["data"]
    return {row["id"]: row for row in data}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    config = make_sim_config({
        name: {"ttft_ms": ttft, "tokens_per_second": tps, "ttft_jitter": 0.1, "output_tokens": 80,
               "slowdown_per_user": 0.0}
        for name, (tps, ttft) in PROFILES.items()
    } | {"quick": {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 8,
                   "capacity": 1000},
         "prefill": {"ttft_ms": 50, "ttft_jitter": 0.05, "tokens_per_second": 2000, "output_tokens": 8,
                     "slowdown_per_user": 0.0, "prefill_tokens_per_second": 20_000,
                     "cached_prefill_tokens_per_second": 1_000_000}})
    with SimProcess(config) as process:
        yield process


def test_reported_p50s_match_the_profiles(sim: SimProcess) -> None:
    catalogue = catalogue_for(sim, {"m": [{"sim": name, "id": name} for name in PROFILES]})
    with GatewayProcess(catalogue) as gw:
        bodies = [{"model": "m", "messages": USER, "provider": {"only": [name]}}
                  for _ in range(50) for name in PROFILES]
        served(asyncio.run(burst(gw.base_url, bodies, 16)))
        view = endpoints_view(gw)
    for name, (tps, ttft) in PROFILES.items():
        stats = view[name]["stats"]
        assert stats["requests"] == 50 and stats["error_rate"] == 0
        assert stats["decode_tps"]["p50"] == pytest.approx(tps, rel=0.10), name
        assert stats["ttft_ms"]["p50"] == pytest.approx(ttft, rel=0.10), name
        assert stats["e2e_ms"]["p50"] > stats["ttft_ms"]["p50"] and stats["age_s"] < 30
    assert set(view["tps70"]) >= {"id", "model", "provider", "tier", "price", "region", "quantization",
                                  "available", "stats"}


def test_the_ttft_curve_and_cache_hit_ratio_are_learned_and_shown(sim: SimProcess) -> None:
    """Cold prompts of 1k..20k tokens teach the prefill rate and base latency; a session whose turns
    stay on the endpoint shows its cache hit ratio."""
    catalogue = catalogue_for(sim, {"m": [{"sim": "prefill", "id": "prefill"}]})
    with GatewayProcess(catalogue) as gw:
        bodies = [{"model": "m", "messages": [{"role": "user", "content": f"{i} " + "x" * (4_000 * k)}]}
                  for i, k in enumerate([1, 2, 5, 10, 15, 20] * 4)]
        served(asyncio.run(burst(gw.base_url, bodies, 6)))
        client = openai.OpenAI(base_url=gw.base_url, api_key="unused")
        messages: list[dict[str, Any]] = [{"role": "system", "content": "s" * 20_000}]
        for turn in range(4):
            messages.append({"role": "user", "content": f"turn {turn} " + "t" * 400})
            answer = client.chat.completions.create(model="m", messages=messages,  # type: ignore[arg-type]
                                                    extra_headers={"x-session-id": "agent-1"})
            messages.append({"role": "assistant", "content": answer.choices[0].message.content})
        # A view holding every attempt: the last one's sample may land just after its answer, and the
        # stats shown are recomputed at most every 250 ms.
        views: list[dict[str, Any]] = []
        wait_until(lambda: views.append(endpoints_view(gw)["prefill"]["stats"]) or views[-1]["requests"] == 28,
                   timeout=10)
        shown = views[-1]["prefill"]
    assert shown["prefill_tps"] == pytest.approx(20_000, rel=0.15)
    assert shown["base_ms"] == pytest.approx(50, abs=40)
    assert shown["cache_hit_ratio"] > 0.8  # turns 2-4 found everything up to their new message cached


def two_replicas(sim: SimProcess, redis_url: str, prefix: str) -> tuple[GatewayProcess, GatewayProcess]:
    catalogue = catalogue_for(sim, {"m": [{"sim": "quick", "id": "quick"}]},
                              gateway={"redis_key_prefix": prefix, "telemetry_flush_s": 0.25})
    env = {"REDIS_URL": redis_url}
    return GatewayProcess(catalogue, env=env), GatewayProcess(catalogue, env=env)


def wait_until(predicate: Any, timeout: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(0.05)
    return time.monotonic() - start


def test_replica_b_sees_traffic_sent_only_through_a(sim: SimProcess, redis_url: str) -> None:
    a, b = two_replicas(sim, redis_url, f"test-{uuid.uuid4().hex[:8]}")
    with together(a, b):
        body = {"model": "m", "messages": USER}
        served(asyncio.run(burst(a.base_url, [body] * 30, 5)))
        took = wait_until(lambda: endpoints_view(b)["quick"]["stats"]["requests"] == 30, timeout=10)
        # A flushes every 0.25 s and B refreshes as often: about 0.5 s, 2 s on a busy machine.
        assert took < 2.0, took
        assert endpoints_view(b)["quick"]["stats"]["ttft_ms"]["p50"] > 0


def test_redis_restart_loses_no_request_and_sharing_resumes(sim: SimProcess,
                                                            private_redis: PrivateRedis) -> None:
    a, b = two_replicas(sim, private_redis.url, "restart")
    failures: list[str] = []
    sent = [0]
    stop = threading.Event()

    def traffic() -> None:
        """Runs beside the restart; anything that goes wrong lands in `failures`, asserted by the test
        (an exception raised in a thread would only be a warning)."""
        try:
            with httpx.Client(base_url=a.base_url, timeout=10) as client:
                while not stop.is_set():
                    r = client.post("/chat/completions", json={"model": "m", "messages": USER})
                    sent[0] += 1
                    if r.status_code != 200:
                        failures.append(r.text)
                    time.sleep(0.01)
        except Exception as exc:  # any failure, reported by the main thread
            failures.append(repr(exc))

    with together(a, b):
        thread = threading.Thread(target=traffic)
        thread.start()
        try:
            time.sleep(1.0)
            private_redis.stop()
            time.sleep(2.0)
            private_redis.start()
            restarted = time.monotonic()
            time.sleep(1.0)  # traffic keeps flowing across the restart too
        finally:
            stop.set()
            thread.join()
        # Sharing resumes: what A serves after the restart shows in B's view. (A restarted Redis that
        # keeps nothing on disk has forgotten what was shared before; each replica keeps serving on
        # its own data meanwhile.)
        before = endpoints_view(b)["quick"]["stats"]["requests"]
        served(asyncio.run(burst(a.base_url, [{"model": "m", "messages": USER}] * 20, 4)))
        wait_until(lambda: endpoints_view(b)["quick"]["stats"]["requests"] >= before + 20, timeout=20)
        # Reconnecting backs off up to 2 s, then a flush and a refresh (0.25 s each), after the 1 s
        # of traffic and the burst above: 5 s leaves room for a busy machine.
        assert time.monotonic() - restarted < 5.0, time.monotonic() - restarted
        assert failures == [] and sent[0] > 50
        logs = a.logs()  # logged once per outage (by each user of Redis), not per request or round trip
        assert logs.count("Redis unreachable") == 2  # telemetry and health
        assert logs.count("sharing paused") == 1 and logs.count("endpoint health stays local") == 1
        # open access counts no client usage, so shares none (test_e2e_access.py: a keyed gateway's outage)
        assert logs.count("limits are enforced per replica") == 0


def flushes(client: redis.Redis) -> int:
    """Script round trips: each flush is one EVAL carrying all its increments, each refresh one more
    reading the buckets that can still change."""
    stats = client.info("commandstats")
    return sum(stats.get(name, {}).get("calls", 0) for name in ("cmdstat_eval", "cmdstat_evalsha"))


def test_redis_writes_scale_with_intervals_not_requests(sim: SimProcess, private_redis: PrivateRedis) -> None:
    interval = 0.5
    catalogue = catalogue_for(sim, {"m": [{"sim": "quick", "id": "quick"}]},
                              gateway={"telemetry_flush_s": interval})
    client = redis.Redis.from_url(private_redis.url)
    with GatewayProcess(catalogue, env={"REDIS_URL": private_redis.url}) as gw:
        body = {"model": "m", "messages": USER}

        def writes_during(requests: int) -> tuple[int, float]:
            client.config_resetstat()
            start = time.monotonic()
            served(asyncio.run(burst(gw.base_url, [body] * requests, 10)))
            time.sleep(1.0)  # let the last flush land
            return flushes(client), time.monotonic() - start

        few, few_s = writes_during(50)
        many, many_s = writes_during(500)
    # 10x the requests: the write round trips follow elapsed time / flush interval, not requests.
    assert few <= 2 * few_s / interval + 3, (few, few_s)
    assert many <= 2 * many_s / interval + 3, (many, many_s)
    assert many < 500 / 10, many
