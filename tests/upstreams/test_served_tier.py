"""End to end: the tier that really served, read from every answer (Anthropic `usage.speed`, OpenAI
`service_tier`), with the simulator's silent downgrade: the `x-ultraroute-served-tier` header, the
access log's `served_tier`, `ultraroute_served_tier_mismatch_total` and the price charged."""

from __future__ import annotations

import uuid

import httpx
import pytest

from gateway.simulator.testing import SimProcess
from tests.harness import GatewayProcess
from tests.upstreams.conftest import access_lines, chat, metric

HELLO = [{"role": "user", "content": "Say hello"}]
MISMATCH = "ultraroute_served_tier_mismatch_total"


def ask(gw: GatewayProcess, model: str, stream: bool = False) -> tuple[str, dict[str, str]]:
    request_id = f"tier-{uuid.uuid4().hex[:12]}"
    c = chat(gw)
    if stream:
        with c.chat.completions.with_streaming_response.create(
                model=model, max_tokens=4, messages=HELLO, stream=True, extra_body={"speed": "fast"},  # type: ignore[arg-type]
                extra_headers={"x-request-id": request_id}) as response:
            list(response.iter_lines())
            return request_id, dict(response.headers)
    raw = c.chat.completions.with_raw_response.create(model=model, max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
                                                      extra_body={"speed": "fast"},
                                                      extra_headers={"x-request-id": request_id})
    raw.parse()
    return request_id, dict(raw.headers)


def cost(line: dict, price_in: float, price_out: float) -> float:  # type: ignore[type-arg]
    tokens = line["tokens"]
    return (tokens["input"] * price_in + tokens["output"] * price_out) / 1e6


def test_anthropic_fast_served_fast_is_charged_fast(gw: GatewayProcess) -> None:
    before = metric(gw, MISMATCH, endpoint="c/claude-fast", asked="fast", served="standard")
    request_id, headers = ask(gw, "c")
    assert headers["x-ultraroute-endpoint"] == "claude-fast" and headers["x-ultraroute-served-tier"] == "fast"
    line = access_lines(gw, {request_id})[request_id]
    assert line["served_tier"] == "fast" and line["cost_usd"] == pytest.approx(cost(line, 30.0, 150.0), abs=1e-8)
    assert metric(gw, MISMATCH, endpoint="c/claude-fast", asked="fast", served="standard") == before


def test_anthropic_silent_downgrade_is_seen_counted_and_charged_standard(gw: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("claude-fast", faults={"downgrade_to": "standard"})
    before = metric(gw, MISMATCH, endpoint="c/claude-fast", asked="fast", served="standard")
    plain, headers = ask(gw, "c")
    streamed, _ = ask(gw, "c", stream=True)
    assert headers["x-ultraroute-served-tier"] == "standard" and headers["x-ultraroute-tier"] == "fast"
    lines = access_lines(gw, {plain, streamed})
    for line in lines.values():  # both charged at the catalogue's standard price of that model
        assert line["served_tier"] == "standard" and line["endpoint"] == "claude-fast"
        assert line["cost_usd"] == pytest.approx(cost(line, 5.0, 25.0), abs=1e-8)
    assert metric(gw, MISMATCH, endpoint="c/claude-fast", asked="fast", served="standard") == before + 2


def test_openai_priority_downgraded_to_default(gw: GatewayProcess, sim: SimProcess) -> None:
    request_id, headers = ask(gw, "p")
    assert headers["x-ultraroute-served-tier"] == "priority"
    assert access_lines(gw, {request_id})[request_id]["served_tier"] == "priority"
    sim.patch("gpt", faults={"downgrade_to": "default"})
    request_id, headers = ask(gw, "p")
    assert headers["x-ultraroute-served-tier"] == "default"
    line = access_lines(gw, {request_id})[request_id]
    assert line["cost_usd"] == pytest.approx(cost(line, 1.25, 10.0), abs=1e-8)  # r's default-tier price
    assert metric(gw, MISMATCH, endpoint="p/gpt-priority", asked="priority", served="default") >= 1


def test_chat_completions_service_tier_is_sent_and_read(gw: GatewayProcess, sim: SimProcess) -> None:
    request_id, headers = ask(gw, "o")
    assert sim.requests("open")[-1]["body"]["service_tier"] == "flex"
    assert headers["x-ultraroute-served-tier"] == "flex"
    assert access_lines(gw, {request_id})[request_id]["served_tier"] == "flex"


def test_no_tier_reported_no_header(gw: GatewayProcess) -> None:
    raw = chat(gw).chat.completions.with_raw_response.create(model="c", max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
                                                             extra_body={"provider": {"only": ["open"]}})
    raw.parse()
    assert raw.headers["x-ultraroute-endpoint"] == "open" and "x-ultraroute-served-tier" not in raw.headers


def test_a_fast_tier_that_keeps_serving_standard_is_demoted(gw: GatewayProcess, sim: SimProcess) -> None:
    sim.patch("claude-down", faults={"downgrade_to": "standard"})
    served = []
    for _ in range(4):
        _, headers = ask(gw, "d")
        served.append((headers["x-ultraroute-endpoint"], headers.get("x-ultraroute-fallback", "")))
    # Three answers in a row at standard: the fast tier is not what it is ranked as, and is demoted.
    assert served[:3] == [("claude-down", "")] * 3
    assert served[3] == ("open", "claude-down->open (downgraded)")
    route = httpx.post(f"{gw.base_url}/route", json={"model": "d", "messages": HELLO, "speed": "fast"}).json()
    assert {"endpoint": "claude-down", "reason": "downgraded"} in route["demoted"]
