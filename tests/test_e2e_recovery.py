"""End to end: fallback that honours the requested model and comes back (issue 13, items 1-3 and 5).

A 429 that says "come back in 2 s" on the requested model's only endpoint is waited for there; one
that says 30 s moves to the next model in `models` at once. A "this model cannot take it" 400
(context length, an unsupported parameter) moves to the next model; a content-policy 400 does not.
An endpoint whose circuit is open is probed in the background -- one probe at a time across two
replicas sharing Redis -- and is back in use within seconds of recovering, with no client request
sent to it while it was down. A failed request's access-log line names its model.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for, together

USER = [{"role": "user", "content": "Write a unit test."}]
PROFILE = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 1000, "output_tokens": 5}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    config = make_sim_config({"prim": dict(PROFILE), "fb": dict(PROFILE), "small": {**PROFILE, "context_length": 300},
                              "pol": dict(PROFILE)})
    with SimProcess(config) as process:
        yield process


@pytest.fixture(scope="module")
def gateway(sim: SimProcess) -> Iterator[GatewayProcess]:
    # No `context_length` in the catalogue for "small": only the provider knows its window.
    catalogue = catalogue_for(sim, {"prim": [{"sim": "prim"}], "fb": [{"sim": "fb"}], "small": [{"sim": "small"}],
                                    "pol": [{"sim": "pol"}]})
    with GatewayProcess(catalogue) as process:
        yield process


def post(gw: GatewayProcess, body: dict[str, Any], request_id: str | None = None) -> httpx.Response:
    headers = {"x-request-id": request_id} if request_id else {}
    return httpx.post(f"{gw.base_url}/chat/completions", json=body, headers=headers, timeout=30)


def test_429_retry_after_is_waited_for_within_the_model(gateway: GatewayProcess, sim: SimProcess) -> None:
    body = {"model": "prim", "models": ["fb"], "messages": USER}
    sim.patch("prim", retry_after_s=2, faults={"error_status": 429, "error_next": 1})  # one 429, retry-after: 2
    start = time.perf_counter()
    r = post(gateway, body)
    elapsed = time.perf_counter() - start
    assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "prim", r.text
    assert r.json()["model"] == "prim"  # the model asked for answered, not the fallback
    attempts = sim.stats("prim")["attempts"]
    assert len(attempts) == 2 and 1.9 <= attempts[1]["t"] - attempts[0]["t"] < 3.0
    assert 1.9 <= elapsed < 4.0
    assert sim.stats("fb")["requests"] == 0

    sim.patch("prim", retry_after_s=30, faults={"error_status": 429, "error_next": 1})  # too long to wait
    start = time.perf_counter()
    r = post(gateway, body)
    elapsed = time.perf_counter() - start
    assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "fb" and r.json()["model"] == "fb"
    assert elapsed < 1.5  # at once: no waiting for a retry-after past retry.max_wait_s
    assert sim.stats("prim")["requests"] == 3 and sim.stats("fb")["requests"] == 1


@pytest.mark.parametrize("code", ["unsupported_parameter", "unsupported_value"])
def test_unsupported_parameter_moves_to_the_next_model(gateway: GatewayProcess, sim: SimProcess, code: str) -> None:
    sim.patch("pol", faults={"error_status": 400, "error_code": code, "error_next": 1})
    before = sim.stats("fb")["requests"]
    r = post(gateway, {"model": "pol", "models": ["fb"], "messages": USER})
    assert r.status_code == 200 and r.json()["model"] == "fb"
    assert sim.stats("fb")["requests"] == before + 1


def test_context_length_exceeded_moves_to_the_next_model(gateway: GatewayProcess, sim: SimProcess) -> None:
    long = [{"role": "user", "content": "tok " * 320}]  # ~320 tokens: over "small"'s real 300
    before = sim.stats("fb")["requests"]
    r = post(gateway, {"model": "small", "models": ["fb"], "messages": long})
    assert r.status_code == 200 and r.json()["model"] == "fb", r.text
    assert r.headers["x-ultraroute-fallback"] == "small->fb (upstream_4xx)"
    assert sim.stats("small")["outcomes"] == {"context_length_exceeded": 1}
    assert sim.stats("fb")["requests"] == before + 1


def test_content_policy_400_does_not_move_on_and_its_log_line_names_the_model(gateway: GatewayProcess,
                                                                               sim: SimProcess) -> None:
    sim.patch("pol", faults={"error_status": 400, "error_code": "content_policy_violation", "error_next": 1})
    before = sim.stats("fb")["requests"]
    request_id = f"policy-{uuid.uuid4().hex[:12]}"
    r = post(gateway, {"model": "pol", "models": ["fb"], "messages": USER}, request_id)
    assert r.status_code == 400 and r.json()["error"]["code"] == "content_policy_violation"
    assert sim.stats("fb")["requests"] == before  # another model would be asked the same

    line = _log_line(gateway, request_id)
    assert line["model"] == "pol" and line["status"] == 400 and line["outcome"] == "error"


def _log_line(gw: GatewayProcess, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 5
    while True:  # access-log lines are written by a background thread
        for text in gw.logs().splitlines():
            if text.startswith("{") and request_id in text:
                return orjson.loads(text)  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, "no access-log line"
        time.sleep(0.05)


def test_open_circuit_is_probed_one_at_a_time_and_recovers_within_seconds(server_redis_url: str) -> None:
    """Down (hanging) for 20 s, then healthy, with two replicas sharing Redis and a request every ~0.25 s."""
    # The fast tier clearly faster than the standard one: a premium tier measured no faster is rightly
    # passed over ("slower"), and equal speeds measured over a few tokens on a busy machine tie at random.
    fast, slow = {**PROFILE, "output_tokens": 20}, {**PROFILE, "output_tokens": 20, "tokens_per_second": 200}
    with SimProcess(make_sim_config({"down": fast, "std": slow})) as sim:
        down = {"sim": "down", "id": "down", "tier": "fast", "first_token_budget_s": 1.0}
        catalogue = catalogue_for(sim, {"m": [down, {"sim": "std", "id": "std"}]},
                                  gateway={"breaker_failures": 2, "breaker_open_s": 40,
                                           "redis_key_prefix": f"probe-{uuid.uuid4().hex[:8]}"})
        # A probe of a hanging endpoint lasts its 1 s first-token budget: with a probe every ~1 s from
        # each replica, two would overlap most of the time without the lock.
        catalogue["health"] = {"probe_interval_s": 1.0}
        # One Redis server: the probe lock and health sharing are proved on a Redis Cluster by
        # test_health_probe.py and test_health_share.py; this test is about time and costs ~25 s a run.
        env = {"REDIS_URL": server_redis_url}
        body = {"model": "m", "messages": USER, "speed": "fast"}
        a, b = GatewayProcess(catalogue, env=env), GatewayProcess(catalogue, env=env)
        with together(a, b):
            sim.patch("down", faults={"hang_rate": 1.0})
            down_at = time.monotonic()
            opened: set[str] = set()
            while opened != {a.url, b.url}:  # until both replicas skip it
                for gw in (a, b):
                    r = post(gw, body)
                    assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "std"
                    if r.headers.get("x-ultraroute-fallback") == "down->std (circuit_open)":
                        opened.add(gw.url)
                assert time.monotonic() - down_at < 10, "the circuit never opened"
            time.sleep(0.5)  # the simulator has seen the last client request's hang-up
            sim.reset()  # from here on, only probes may reach "down"
            while time.monotonic() - down_at < 20:
                for gw in (a, b):
                    r = post(gw, body)
                    assert r.headers["x-ultraroute-fallback"] == "down->std (circuit_open)"  # no client request
                time.sleep(0.25)
            stats = sim.stats("down")
            assert stats["requests"] >= 4  # probed, by one replica or the other ...
            assert stats["max_active"] == 1  # ... never two at once

            sim.patch("down", faults={"hang_rate": 0.0})
            up_at = time.monotonic()
            back: dict[str, float] = {}
            last: dict[str, str] = {}  # what the last request of each replica said, should one not come back
            while len(back) < 2:
                for gw in (a, b):
                    if gw.url in back:
                        continue
                    r = post(gw, body)
                    last[gw.url] = f"{r.headers['x-ultraroute-endpoint']} {r.headers.get('x-ultraroute-fallback')}"
                    if r.headers["x-ultraroute-endpoint"] == "down":
                        back[gw.url] = time.monotonic() - up_at
                assert time.monotonic() - up_at < 10, (f"not back in use within 10 s of recovering: {back}, {last}\n"
                                                       + "\n".join(gw.logs()[-3000:] for gw in (a, b)))
                time.sleep(0.25)
            print(f"probes while down: {stats['requests']}, at most {stats['max_active']} at once; "
                  f"back in use {', '.join(f'{s:.1f}' for s in back.values())} s after recovering")
            metrics = httpx.get(f"{a.url}/metrics").text + httpx.get(f"{b.url}/metrics").text
            assert 'ultraroute_probes_total{endpoint="down",model="m",outcome="timeout",tier="fast"}' in metrics
            assert 'ultraroute_probes_total{endpoint="down",model="m",outcome="ok",tier="fast"}' in metrics
            probes = [orjson.loads(line) for line in (a.logs() + b.logs()).splitlines() if '"probe":true' in line]
            assert {p["outcome"] for p in probes} == {"timeout", "ok"} and all(p["model"] == "m" for p in probes)
