"""End to end: two replicas sharing Redis share circuit-breaker and cool-down state."""

from __future__ import annotations

import time
import uuid

import httpx

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for, together

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "speed": "fast"}


def post(gw: GatewayProcess) -> httpx.Response:
    return httpx.post(f"{gw.base_url}/chat/completions", json=BODY, timeout=10)


def wait_demoted(gw: GatewayProcess, reason: str) -> None:
    """Until `gw` keeps `fast` out for `reason` (its `/v1/route` says so, taking no probe's turn): what the
    other replica noted has reached it through Redis."""
    deadline = time.monotonic() + 10
    while {"endpoint": "fast", "reason": reason} not in (
            demoted := httpx.post(f"{gw.base_url}/route", json=BODY, timeout=10).json()["demoted"]):
        assert time.monotonic() < deadline, demoted
        time.sleep(0.05)


def test_breaker_and_cooldown_are_shared(redis_url: str) -> None:
    profile = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 1000, "output_tokens": 5}
    with SimProcess(make_sim_config({"fast": dict(profile), "std": dict(profile)})) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "fast", "id": "fast", "tier": "fast"},
                                              {"sim": "std", "id": "std"}]},
                                  gateway={"breaker_failures": 3, "breaker_open_s": 30,
                                           "redis_key_prefix": f"share-{uuid.uuid4().hex[:8]}"})
        catalogue["health"] = {"probe": False}  # requests are counted: no background probes
        env = {"REDIS_URL": redis_url}
        a, b = GatewayProcess(catalogue, env=env), GatewayProcess(catalogue, env=env)
        with together(a, b):
            sim.patch("fast", faults={"error_rate": 1.0, "error_status": 503})
            for _ in range(3):  # served by std; A's breaker for fast opens
                r = post(a)
                assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "std"
                assert r.headers["x-ultraroute-fallback"] == "fast->std (upstream_5xx)"
                assert r.headers["x-ultraroute-attempts"] == "2"
            wait_demoted(b, "circuit_open")
            tried = sim.stats("fast")["requests"]
            r = post(b)
            assert r.headers["x-ultraroute-fallback"] == "fast->std (circuit_open)"
            assert r.headers["x-ultraroute-endpoint"] == "std" and r.headers["x-ultraroute-attempts"] == "1"
            assert tried == 3 and sim.stats("fast")["requests"] == tried  # B never tried the endpoint A found broken

    with SimProcess(make_sim_config({"fast": dict(profile), "std": dict(profile)})) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "fast", "id": "fast", "tier": "fast"},
                                              {"sim": "std", "id": "std"}]},
                                  gateway={"redis_key_prefix": f"share-{uuid.uuid4().hex[:8]}"})
        a, b = GatewayProcess(catalogue, env=env), GatewayProcess(catalogue, env=env)
        with together(a, b):
            sim.patch("fast", capacity=0, retry_after_s=20)  # 429 with retry-after: 20 s
            assert post(a).headers["x-ultraroute-fallback"] == "fast->std (rate_limited)"
            wait_demoted(b, "cooldown")
            assert post(b).headers["x-ultraroute-fallback"] == "fast->std (cooldown)"
            assert sim.stats("fast")["requests"] == 1
