"""End to end: fallback from the fast tier to standard capacity, retries and circuit breaking.

Each test injects one fault into the simulated fast tier and asserts both what the client got and
what the simulator saw (attempt counts and their spacing).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for
from tests.scrape import metric_value
from tests.test_e2e_routing import burst

USER = [{"role": "user", "content": "Write a unit test."}]
FAST = {"model": "m", "messages": USER, "speed": "fast"}
NO_FAULTS = {"error_rate": 0.0, "hang_rate": 0.0, "drop_rate": 0.0, "stall_rate": 0.0, "malformed_rate": 0.0,
             "error_event_rate": 0.0, "no_done_rate": 0.0, "refuse": False, "error_status": 503}
BREAKER_OPEN_S = 2.0
PROVIDER_KEY = "sk-denied-0123456789abcdef"


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    profile = {"ttft_ms": 80, "ttft_jitter": 0, "tokens_per_second": 400, "output_tokens": 20}
    # The standard tier decodes ten times slower than the fast ones: a busy machine's noise in the measured
    # decode rates must never make a fast endpoint look "slower" and spill it (a 2.5x gap was not enough).
    config = make_sim_config({"fast": {**profile, "tokens_per_second": 1000},
                              "std": {**profile, "tokens_per_second": 100},
                              "big": {**profile, "context_length": 100000},
                              "small": {**profile, "context_length": 300},
                              "down": {**profile, "faults": {"error_rate": 1.0, "error_status": 503}},
                              # A provider that refuses the gateway's key, quoting it as some do.
                              "denied": {**profile, "faults": {"error_rate": 1.0, "error_status": 401,
                                                               "echo_key_in_errors": True}},
                              "flaky": {**profile, "tokens_per_second": 1000},
                              # Fast: its ten successes come within the stats cache's TTL (a stale
                              # view missed the last of them: the retry must count them all).
                              "sporadic": {**profile, "ttft_ms": 5, "tokens_per_second": 1000},
                              "brk": {**profile, "tokens_per_second": 1000},
                              "evt": {**profile, "tokens_per_second": 1000},
                              "slot": {**profile, "ttft_ms": 20, "tokens_per_second": 100, "output_tokens": 30},
                              "hang": {**profile, "faults": {"hang_rate": 1.0}}})
    with SimProcess(config) as process:
        yield process


@pytest.fixture(scope="module")
def gateway(sim: SimProcess) -> Iterator[GatewayProcess]:
    catalogue = catalogue_for(sim, {
        "m": [{"sim": "fast", "id": "fast", "tier": "fast", "first_token_budget_s": 1.0,
               "slo": {"ttft_ms": 150}},
              {"sim": "std", "id": "std", "tier": "standard"}],
        "solo": [{"sim": "fast", "id": "solo"}],
        "cap": [{"sim": "fast", "id": "capfast", "tier": "fast", "max_concurrency": 2},
                {"sim": "std", "id": "capstd"}],
        # The catalogue believes "small" takes 2000 tokens; the provider says 300 when asked.
        "ctx": [{"sim": "small", "id": "small", "context_length": 2000},
                {"sim": "big", "id": "big", "context_length": 100000}],
        "down": [{"sim": "down", "id": "down"}],
        "auth": [{"sim": "denied", "id": "denied", "tier": "fast"}, {"sim": "std", "id": "std"}],
        "flaky": [{"sim": "flaky", "id": "flaky", "tier": "fast"}, {"sim": "std", "id": "std"}],
        "sporadic": [{"sim": "sporadic", "id": "sporadic", "tier": "fast"}, {"sim": "std", "id": "std"}],
        "breaker": [{"sim": "brk", "id": "brk", "tier": "fast"}, {"sim": "std", "id": "std"}],
        "event": [{"sim": "evt", "id": "evt", "tier": "fast"}, {"sim": "std", "id": "std"}],
    }, gateway={"breaker_failures": 3, "breaker_open_s": BREAKER_OPEN_S, "stall_timeout_s": 1.5})
    # These tests count every request the simulator sees and exercise the half-open client probe;
    # background probes of open circuits are tested in test_e2e_recovery.py.
    catalogue["health"] = {"probe": False}
    catalogue["providers"]["denied"]["api_key_env"] = "DENIED_PROVIDER_KEY"
    with GatewayProcess(catalogue, env={"DENIED_PROVIDER_KEY": PROVIDER_KEY}) as process:
        yield process


def unhealthy_signs(gateway: GatewayProcess) -> tuple[float, float]:
    """What could leave model m's shared endpoints (fast, std) open or cooling down: its attempts that
    did not end ok so far, and its circuits open now (an SLO demotion opens one after ok answers)."""
    text = httpx.get(f"{gateway.url}/metrics", timeout=10).text
    not_ok = metric_value(text, "ultraroute_requests_total", model="m") - \
        metric_value(text, "ultraroute_requests_total", model="m", status="ok")
    return not_ok, metric_value(text, "ultraroute_endpoint_circuit_open", model="m")


@pytest.fixture(scope="module")
def not_ok_seen() -> list[float]:
    """m's attempts that had not ended ok when the last test began (one number, updated by `healthy`)."""
    return [0.0]


@pytest.fixture(autouse=True)
def healthy(sim: SimProcess, gateway: GatewayProcess, not_ok_seen: list[float]) -> Iterator[None]:
    sim.patch("fast", faults=NO_FAULTS, ttft_ms=80, retry_after_s=1.0)
    sim.patch("std", faults=NO_FAULTS)
    not_ok, open_circuits = unhealthy_signs(gateway)
    if not_ok > not_ok_seen[0] or open_circuits:
        time.sleep(2.2)  # any circuit opened by the previous test is ready for its probe
    # (Otherwise none of m's attempts failed and none of its circuits opened since: nothing to wait out.)
    # One good request through the fast tier closes a half-open circuit from the previous test.
    httpx.post(f"{gateway.base_url}/chat/completions", json=FAST, timeout=10)
    not_ok_seen[0] = unhealthy_signs(gateway)[0]
    sim.reset()
    yield


def post(gateway: GatewayProcess, body: dict[str, Any] = FAST) -> httpx.Response:
    return httpx.post(f"{gateway.base_url}/chat/completions", json=body, timeout=30)


def assert_failed_over(r: httpx.Response, fallback: str, endpoint: str = "std", attempts: int = 2) -> None:
    """Served, by `endpoint`, after the failures the fallback header names (a prefix of it)."""
    assert r.status_code == 200, r.text
    assert r.headers["x-ultraroute-endpoint"] == endpoint, r.headers
    assert r.headers["x-ultraroute-fallback"].startswith(fallback), r.headers
    assert r.headers["x-ultraroute-attempts"] == str(attempts), r.headers


@pytest.mark.parametrize("fault", [{"error_rate": 1.0, "error_status": 429}, {"error_rate": 1.0, "error_status": 503},
                                   {"refuse": True}])
def test_fast_tier_failure_falls_back_to_standard(gateway: GatewayProcess, sim: SimProcess,
                                                  fault: dict[str, Any]) -> None:
    sim.patch("fast", faults=fault)
    for _ in range(3):
        r = post(gateway)
        assert r.status_code == 200
        assert r.headers["x-ultraroute-endpoint"] == "std" and r.headers["x-ultraroute-tier"] == "standard"
        assert r.headers["x-ultraroute-fallback"].startswith("fast->std (")


def test_hang_is_abandoned_at_the_first_token_budget(gateway: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("fast", faults={"hang_rate": 1.0})
    r = post(gateway)
    assert r.status_code == 200 and r.headers["x-ultraroute-fallback"] == "fast->std (timeout)"
    assert sim.stats("fast")["requests"] == 1  # the silent endpoint is not retried for this request
    # How long the hung attempt stayed open, as the simulator saw it: the budget (1 s), give or take a
    # busy machine's scheduling (the gateway's own loop lag extends its budgets: serve/lag.py), and far
    # from the hang's own end (never). Then std was asked, not before.
    hung = sim.stats("fast")["attempts"][-1]
    served = sim.stats("std")["attempts"][-1]
    assert hung["outcome"] == "hung" and 0.95 <= hung["duration_ms"] / 1000 < 2.5, hung
    assert served["t"] >= hung["t"] + 0.95, (hung, served)


def test_hedging_starts_the_next_endpoint_and_cancels_the_loser(gateway: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("fast", faults={"hang_rate": 1.0})
    r = post(gateway, {**FAST, "provider": {"hedge_after_ms": 200}})
    assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "std"
    sim.wait_for("fast", lambda s: s["cancelled"] == 1, timeout=5.0)  # the loser was cancelled
    # Hedged, not abandoned at the 1 s first-token budget and then failed over: std was asked while the
    # hung attempt was still open.
    hung = sim.stats("fast")["attempts"][-1]
    hedge = sim.stats("std")["attempts"][-1]
    hung_closed = hung["t"] + hung["duration_ms"] / 1000
    assert hung["t"] < hedge["t"] < hung_closed, (hung, hedge)


def test_capacity_queue_then_spill_to_the_next_candidate(gateway: GatewayProcess) -> None:
    body = {"model": "cap", "messages": USER, "speed": "fast"}
    responses = asyncio.run(burst(gateway.base_url, [body] * 14, 14))
    assert all(r.status_code == 200 for r in responses)
    by = [r.headers["x-ultraroute-endpoint"] for r in responses]
    spilled = [r.headers.get("x-ultraroute-fallback") for r in responses
               if r.headers["x-ultraroute-endpoint"] == "capstd"]
    assert by.count("capfast") >= 2 and spilled and all(s == "capfast->capstd (capacity)" for s in spilled), by


def test_single_500_is_retried_once_then_fails_over(gateway: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("fast", faults={"error_rate": 1.0, "error_status": 500})
    r = post(gateway)
    assert r.status_code == 200 and r.headers["x-ultraroute-attempts"] == "3"
    attempts = sim.stats("fast")["attempts"]
    assert len(attempts) == 2 and attempts[1]["t"] - attempts[0]["t"] < 1.5


def test_429_with_short_retry_after_and_no_other_candidate_waits(gateway: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("fast", retry_after_s=0.5, capacity=0)  # every request is rate limited, retry-after 0.5 s
    r = post(gateway, {"model": "solo", "messages": USER})
    assert r.status_code == 429 and r.headers["x-should-retry"] == "false" and "retry-after" in r.headers
    attempts = sim.stats("fast")["attempts"]
    assert len(attempts) == 2  # waited and tried the same endpoint once more, never a third time
    assert 0.45 <= attempts[1]["t"] - attempts[0]["t"] < 1.5
    sim.patch("fast", capacity=256)


def test_no_fallbacks_passes_the_upstream_error_on(gateway: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("fast", faults={"error_rate": 1.0, "error_status": 503})
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused")
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model="m", messages=USER,
                                       extra_body={"speed": "fast", "provider": {"allow_fallbacks": False}})
    assert info.value.status_code == 503 and info.value.body["type"]
    assert sim.stats("std")["requests"] == 0


def test_breaker_skips_then_half_open_probe_restores(gateway: GatewayProcess, sim: SimProcess) -> None:
    # An endpoint of its own, failing from its first request: "fast" has served every earlier test
    # here, so it mostly works and a 503 of it would be tried there once more (retry.py).
    # Two tokens: the five skipped requests below fit in the 2 s the circuit stays open, even on a busy
    # machine (twenty at std's 100 tok/s took long enough for the last to be the half-open probe).
    body = {**FAST, "model": "breaker", "max_tokens": 2}
    sim.patch("brk", faults={"error_rate": 1.0, "error_status": 503})
    for _ in range(3):
        r = post(gateway, body)
        assert_failed_over(r, "brk->std (upstream_5xx)")
    tried = sim.stats("brk")["requests"]
    assert tried == 3
    for _ in range(5):
        r = post(gateway, body)
        assert r.headers["x-ultraroute-fallback"] == "brk->std (circuit_open)"
    assert sim.stats("brk")["requests"] == tried  # skipped with no attempt while open
    sim.patch("brk", faults=NO_FAULTS)
    time.sleep(2.1)
    r = post(gateway, body)  # the half-open probe
    assert r.headers["x-ultraroute-endpoint"] == "brk"
    assert post(gateway, body).headers["x-ultraroute-endpoint"] == "brk"


def test_slow_fast_tier_is_demoted_for_its_slo(gateway: GatewayProcess, sim: SimProcess) -> None:
    """Demoted like an open circuit (README, Fallback): skipped with `(slo)`, and after
    `breaker_open_s` one request is let through as a probe, judged against the SLO and, still too
    slow, demoted again. So after the demotion the slow endpoint serves only probes, each at least
    `breaker_open_s` after the request that demoted it (a half-open probe is the documented
    behaviour, not a leak: asserting that none lands in the last five requests was the flaky part)."""
    sim.patch("fast", ttft_ms=750)  # TTFT 5x its 150 ms SLO, no errors, within its 1 s budget
    served = []  # (client-side start, endpoint, fallback)
    for _ in range(20):
        start = time.monotonic()
        r = post(gateway)
        served.append((start, r.headers["x-ultraroute-endpoint"], r.headers.get("x-ultraroute-fallback", "")))
    demoted = next((i for i, (_, _, fallback) in enumerate(served) if fallback), -1)
    assert 1 <= demoted <= 5 and served[demoted][1:] == ("std", "fast->std (slo)"), served
    last_fast = served[demoted - 1][0]  # the request whose slow answer demoted it
    probes = 0
    for start, endpoint, fallback in served[demoted:]:
        if endpoint == "fast":  # a half-open probe: not before the demotion has run its course
            assert fallback == "" and start - last_fast >= BREAKER_OPEN_S, served
            last_fast, probes = start, probes + 1
        else:
            assert (endpoint, fallback) == ("std", "fast->std (slo)"), served
    assert len(served) - demoted - probes >= 10, served  # demoted for most of the run


def test_context_length_exceeded_moves_to_a_larger_context(gateway: GatewayProcess, sim: SimProcess) -> None:
    # ~250 tokens: within what the catalogue claims for "small" (so it is tried), over its real 300.
    r = post(gateway, {"model": "ctx", "messages": [{"role": "user", "content": "tok " * 320}], "max_tokens": 10,
                       "provider": {"order": ["small", "big"]}})
    assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "big"
    assert sim.stats("small")["requests"] == 1


def test_client_error_returns_at_once_with_the_providers_reason(gateway: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("fast", faults={"error_rate": 1.0, "error_status": 400})
    r = post(gateway)
    assert r.status_code == 400
    assert r.json()["error"]["message"] == "Simulated upstream error 400"  # passed on unchanged
    assert sim.stats("fast")["requests"] == 1 and sim.stats("std")["requests"] == 0  # no retry, no failover


def test_error_event_inside_a_200_stream_fails_over(gateway: GatewayProcess, sim: SimProcess) -> None:
    # An endpoint with no history: one that mostly works would be tried once more (retry.py).
    sim.patch("evt", faults={"error_event_rate": 1.0})
    r = post(gateway, {**FAST, "model": "event"})
    assert_failed_over(r, "evt->std (")
    assert sim.stats("evt")["requests"] == 1 and sim.stats("std")["requests"] == 1


def test_malformed_chunk_is_skipped_and_missing_done_is_finished(gateway: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("fast", faults={"malformed_rate": 1.0, "no_done_rate": 1.0})
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused")
    chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True,
                                                 extra_body={"speed": "fast"}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len(text.split()) == 20 and chunks[-1].choices[0].finish_reason == "stop"
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", json={**FAST, "stream": True}) as r:
        assert r.read().endswith(b"data: [DONE]\n\n")


def test_mid_stream_drop_raises_in_the_sdk_without_repeats(gateway: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("fast", faults={"drop_rate": 1.0, "drop_after_tokens": 8})
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused")
    seen: list[str] = []
    with pytest.raises(openai.APIError):
        for chunk in client.chat.completions.create(model="m", messages=USER, stream=True,
                                                    extra_body={"speed": "fast", "provider": {"only": ["fast"]}}):
            if chunk.choices:
                seen.append(chunk.choices[0].delta.content or "")
    # The answer is a function of the messages: what arrived must be the start of the uncut answer,
    # once. A stream restarted from scratch (or a continuation that repeats) would not be.
    whole = client.chat.completions.create(model="m", messages=USER, extra_body={"provider": {"only": ["std"]}})
    uncut = (whole.choices[0].message.content or "").split()
    words = "".join(seen).split()
    assert len(uncut) == 20 and 0 < len(words) <= 8 and words == uncut[:len(words)], (words, uncut)


def test_mid_stream_stall_ends_with_an_error_within_the_stall_timeout(gateway: GatewayProcess,
                                                                        sim: SimProcess) -> None:
    sim.patch("fast", faults={"stall_rate": 1.0, "drop_after_tokens": 5})
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", timeout=30)
    start = time.perf_counter()
    with pytest.raises(openai.APIError, match="stalled"):
        for _ in client.chat.completions.create(model="m", messages=USER, stream=True,
                                                extra_body={"speed": "fast", "provider": {"only": ["fast"]}}):
            pass
    assert time.perf_counter() - start < 1.5 + 1.0  # stall timeout 1.5 s, plus the TTFT and slack


def test_mid_stream_recovery_continues_the_answer_elsewhere() -> None:
    profile = {"ttft_ms": 50, "ttft_jitter": 0, "tokens_per_second": 500, "output_tokens": 60}
    config = make_sim_config({"cut": {**profile, "faults": {"drop_rate": 1.0, "drop_after_tokens": 40}},
                              "prefix": {**profile, "accepts_prefix": True},
                              "plain": dict(profile)})
    with SimProcess(config) as sim:
        catalogue = catalogue_for(sim, {
            "rec": [{"sim": "cut", "id": "cut"},
                    {"sim": "prefix", "id": "prefix", "capabilities": ["assistant_prefix"]}],
            "norec": [{"sim": "cut", "id": "cut"}, {"sim": "plain", "id": "plain"}],
        })
        with GatewayProcess(catalogue) as gw:
            client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)

            def text(model: str, order: list[str]) -> str:
                stream = client.chat.completions.create(model=model, messages=USER, stream=True,
                                                        extra_body={"provider": {"order": order}})
                return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

            uncut = text("rec", ["prefix"])
            recovered = text("rec", ["cut", "prefix"])
            assert recovered == uncut and len(uncut.split()) == 60
            attempts = sim.stats("prefix")["attempts"]
            assert attempts[-1]["prefix_tokens"] == 40  # only the rest was generated
            non_streaming = client.chat.completions.create(model="rec", messages=USER,
                                                           extra_body={"provider": {"order": ["cut", "prefix"]}})
            assert non_streaming.choices[0].message.content == uncut
            before = sim.stats("plain")["requests"]
            with pytest.raises(openai.APIError):
                text("norec", ["cut", "plain"])  # no endpoint accepts a prefix: a clear error
            assert sim.stats("plain")["requests"] == before  # and none was sent one


# --- README promises with no end-to-end test before (issue 13, item 7) -------------------------


def test_models_fallback_serves_from_the_next_model_and_names_it(gateway: GatewayProcess, sim: SimProcess) -> None:
    """`models: [a, b]`: tried in order when no endpoint of the first can serve; the response's
    `model` names the one that served."""
    client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
    with pytest.raises(openai.InternalServerError):  # alone, the model that is down fails
        client.chat.completions.create(model="down", messages=USER)
    raw = client.chat.completions.with_raw_response.create(model="down", messages=USER, extra_body={"models": ["m"]})
    completion = raw.parse()
    assert completion.model == "m" and completion.choices[0].message.content
    assert raw.headers["x-ultraroute-endpoint"] == "std" and raw.headers["x-ultraroute-attempts"] == "2"
    assert raw.headers["x-ultraroute-fallback"] == "down->std (upstream_5xx)"
    chunks = list(client.chat.completions.create(model="down", messages=USER, stream=True,
                                                 extra_body={"models": ["m"]}))
    assert chunks and {c.model for c in chunks} == {"m"}
    assert sim.stats("down")["requests"] == 3 and sim.stats("std")["requests"] == 2


def test_a_503_from_an_endpoint_that_mostly_works_is_tried_there_once_more(gateway: GatewayProcess,
                                                                          sim: SimProcess) -> None:
    """A 503 from an endpoint with no record (or one that mostly fails: test_retry.py) moves on at once;
    from one that has served most of its recent requests it is passing, and tried there again."""
    body = {"model": "sporadic", "messages": USER, "speed": "fast"}
    sim.patch("sporadic", faults={"error_next": 1, "error_status": 503})
    assert_failed_over(post(gateway, body), "sporadic->std (upstream_5xx)")  # no record yet: it may be down
    for _ in range(10):
        r = post(gateway, body)
        assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "sporadic"
    sim.patch("sporadic", faults={"error_next": 1, "error_status": 503})
    r = post(gateway, body)
    assert_failed_over(r, "sporadic->sporadic (upstream_5xx)", endpoint="sporadic")
    assert sim.stats("std")["requests"] == 1  # only the first request's fallback


def test_error_rate_breaker_opens_without_consecutive_failures(gateway: GatewayProcess, sim: SimProcess) -> None:
    """Two failures in every three never make `breaker_failures` (3) in a row, but an error rate
    over 50% of the recent outcomes opens the circuit all the same."""
    body = {"model": "flaky", "messages": USER, "speed": "fast"}
    for fails in (True, True, False) * 3 + (True,):  # 7 failures in 10 outcomes, never 3 in a row
        sim.patch("flaky", faults={"error_rate": 1.0 if fails else 0.0, "error_status": 503})
        r = post(gateway, body)
        if fails:
            assert_failed_over(r, "flaky->std (upstream_5xx)")
        else:
            assert r.status_code == 200 and r.headers["x-ultraroute-endpoint"] == "flaky"
    r = post(gateway, body)
    assert_failed_over(r, "flaky->std (circuit_open)", attempts=1)


def test_provider_401_takes_the_endpoint_out(gateway: GatewayProcess, sim: SimProcess) -> None:
    """A provider that refuses the gateway's key: that request fails over, the endpoint is skipped from
    then on (`misconfigured`), logged once, and the key it quoted reaches neither client nor log."""
    body = {"model": "auth", "messages": USER, "speed": "fast"}
    first = post(gateway, body)
    assert_failed_over(first, "denied->std (upstream_401)")
    for _ in range(3):
        assert_failed_over(post(gateway, body), "denied->std (misconfigured)", attempts=1)
    assert sim.stats("denied")["requests"] == 1 and sim.stats("std")["requests"] == 4
    logs = gateway.logs()
    assert logs.count("rejected the gateway's credentials") == 1 and PROVIDER_KEY not in logs


SLOT_FIRST = {"provider": {"order": ["slot"]}}


def wait_for_queue_depth(gw: GatewayProcess, endpoint: str, depth: int) -> None:
    deadline = time.monotonic() + 20
    while metric_value(httpx.get(f"{gw.url}/metrics").text, "ultraroute_queue_depth", endpoint=endpoint) < depth:
        assert time.monotonic() < deadline, f"{endpoint}'s queue never reached {depth}"
        time.sleep(0.02)


def test_priority_orders_the_capacity_queue(sim: SimProcess) -> None:
    """`x-ultraroute-priority`: with the endpoint at its `max_concurrency` (1), a `high` request that
    joined the queue after a `low` one gets the slot first. Provably after: `high` is sent only once
    the gateway's queue-depth metric shows `low` waiting; and the slot is freed (its holder hangs up)
    only once both wait, within `capacity_wait_s` (long here: nobody spills)."""
    catalogue = catalogue_for(sim, {"queue": [{"sim": "slot", "id": "slot", "max_concurrency": 1},
                                              {"sim": "std", "id": "overflow"}]}, gateway={"capacity_wait_s": 30})
    catalogue["health"] = {"probe": False}
    results: dict[str, httpx.Response] = {}
    errors: list[BaseException] = []

    def send(name: str, priority: str) -> None:
        body = {"model": "queue", "messages": [{"role": "user", "content": name}], "max_tokens": 3, **SLOT_FIRST}
        try:
            results[name] = httpx.post(f"{gw.base_url}/chat/completions", json=body, timeout=60,
                                       headers={"x-ultraroute-priority": priority})
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    with GatewayProcess(catalogue) as gw:
        holding = {"model": "queue", "messages": [{"role": "user", "content": "holder"}], "max_tokens": 2000,
                   "stream": True, **SLOT_FIRST}  # 20 s at the slot's 100 tok/s: it holds the slot until it hangs up
        waiting = {"low": threading.Thread(target=send, args=("low", "low")),
                   "high": threading.Thread(target=send, args=("high", "high"))}
        with httpx.Client(timeout=60) as holder, \
                holder.stream("POST", f"{gw.base_url}/chat/completions", json=holding) as held:
            chunks = held.iter_raw()  # kept: a dropped iterator would close the stream
            assert held.status_code == 200 and next(chunks)  # streaming: the slot is taken
            waiting["low"].start()
            wait_for_queue_depth(gw, "slot", 1)
            waiting["high"].start()
            wait_for_queue_depth(gw, "slot", 2)
            assert sim.stats("slot")["active"] == 1  # still only the holder at the endpoint
        for thread in waiting.values():  # the holder has hung up: the slot goes to the queue
            thread.join(timeout=60)
        assert not errors, errors
        assert {k: (r.status_code, r.headers["x-ultraroute-endpoint"]) for k, r in results.items()} == \
            {"low": (200, "slot"), "high": (200, "slot")}, {k: r.text for k, r in results.items()}
        arrived = [r["body"]["messages"][0]["content"] for r in sim.requests("slot")]
        assert arrived[-3:] == ["holder", "high", "low"], arrived  # high went first, then low


def test_deadline_bounds_the_whole_request(sim: SimProcess) -> None:
    """`gateway.deadline_s` (1 s): an endpoint that never answers, with a 5 s first-token budget of its
    own, is given up at the deadline, and no further candidate is started after it."""
    catalogue = catalogue_for(sim, {"late": [{"sim": "hang", "id": "hang", "first_token_budget_s": 5.0},
                                             {"sim": "std", "id": "std"}]}, gateway={"deadline_s": 1.0})
    with GatewayProcess(catalogue) as gw:
        before = sim.stats("std")["requests"]
        start = time.perf_counter()
        r = post(gw, {"model": "late", "messages": USER, "provider": {"order": ["hang", "std"]}})
        elapsed = time.perf_counter() - start
    assert r.status_code == 504 and r.json()["error"]["code"] == "upstream_timeout", r.text
    assert 0.95 <= elapsed < 3.0, elapsed  # the deadline, not the 5 s budget (margin for a busy machine)
    assert sim.stats("std")["requests"] == before
