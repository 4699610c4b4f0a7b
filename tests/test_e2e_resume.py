"""End to end: an answer that breaks mid-stream and is continued elsewhere (issue 32, item 8).

The fast tier drops every stream after 20 tokens; a standard tier that accepts an assistant prefix
continues it. With `max_tokens` 50, the client must get 50 tokens in all (the continuation is asked
for what is left), usage that counts every token it received, headers and an access-log line that
name the path, and a key charged for both attempts at the catalogue's prices.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

USER = [{"role": "user", "content": "Write a unit test for the parser."}]
ADMIN_KEY = "admin-" + "r" * 30
PROFILE = {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 1000, "output_tokens": 80}
CUT_AFTER = 20
MAX_TOKENS = 50
PRICES = {"cut": {"input": 100.0, "output": 1000.0}, "prefix": {"input": 300.0, "output": 3000.0}}
ORDER = {"speed": "fast", "provider": {"order": ["cut", "prefix"]}}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    # The fast tier clearly faster: one measured no faster would be passed over ("slower").
    config = make_sim_config({"cut": {**PROFILE, "tokens_per_second": 2000,
                                      "faults": {"drop_rate": 1.0, "drop_after_tokens": CUT_AFTER}},
                              "prefix": {**PROFILE, "tokens_per_second": 400, "accepts_prefix": True}})
    with SimProcess(config) as process:
        yield process


@pytest.fixture(scope="module")
def gateway(sim: SimProcess) -> Iterator[GatewayProcess]:
    catalogue = catalogue_for(sim, {"rec": [
        {"sim": "cut", "id": "cut", "tier": "fast", "price": PRICES["cut"]},
        {"sim": "prefix", "id": "prefix", "tier": "standard", "price": PRICES["prefix"],
         "capabilities": ["assistant_prefix"]}]}, gateway={"redis_key_prefix": f"res-{uuid.uuid4().hex[:8]}"})
    with GatewayProcess(catalogue, open_access=False, env={"ULTRAROUTE_ADMIN_KEY": ADMIN_KEY}) as process:
        yield process


ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}


def new_key(gw: GatewayProcess) -> tuple[str, str]:
    created = httpx.post(f"{gw.url}/admin/keys", headers=ADMIN, json={"name": f"k-{uuid.uuid4().hex[:6]}"})
    assert created.status_code == 201, created.text
    return created.json()["key"], created.json()["id"]


def uncut_text(gw: GatewayProcess) -> str:
    """The answer served whole, by the endpoint that continues the others (on a key of its own)."""
    client = openai.OpenAI(base_url=gw.base_url, api_key=new_key(gw)[0], max_retries=0)
    whole = client.chat.completions.create(model="rec", messages=USER, max_tokens=MAX_TOKENS,  # type: ignore[arg-type]
                                           extra_body={"provider": {"only": ["prefix"]}})
    return whole.choices[0].message.content or ""


def log_line(gw: GatewayProcess, request_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while True:  # access-log lines are written by a background thread
        for text in gw.logs().splitlines():
            if text.startswith("{") and f'"request_id":"{request_id}"' in text:
                return orjson.loads(text)  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, "no access-log line"
        time.sleep(0.05)


def spend_of(gw: GatewayProcess, key_id: str, expected: float) -> float:
    """The key's spend, once it has reached `expected` (the charge follows the answer), or after 10 s."""
    deadline = time.monotonic() + 10
    while True:
        spent = float(httpx.get(f"{gw.url}/admin/keys/{key_id}/spend", headers=ADMIN).json()["spend_usd"])
        if abs(spent - expected) < 1e-6 or time.monotonic() > deadline:
            return spent
        time.sleep(0.1)


def check_bill(gw: GatewayProcess, key_id: str, line: dict[str, Any]) -> None:
    """Both attempts in the log, each costed at its endpoint's catalogue price; the key charged their sum."""
    assert line["attempts"] == 2 and line["fallback"] == [{"endpoint": "cut", "reason": "stream_broken"}]
    charged = line["attempt_costs"]
    assert [a["endpoint"] for a in charged] == ["cut", "prefix"]
    assert [a["tokens"]["output"] for a in charged] == [CUT_AFTER, MAX_TOKENS - CUT_AFTER]
    total = 0.0
    for a in charged:
        price, tokens = PRICES[a["endpoint"]], a["tokens"]
        assert tokens["input"] > 0
        cost = (tokens["input"] * price["input"] + tokens["output"] * price["output"]) / 1e6
        assert a["cost_usd"] == pytest.approx(cost, rel=1e-6)
        total += cost
    assert line["cost_usd"] == pytest.approx(total, rel=1e-6)
    assert spend_of(gw, key_id, total) == pytest.approx(total, abs=2e-6)  # a new key: this request alone


def test_streamed_recovery_keeps_max_tokens_usage_and_the_bill(gateway: GatewayProcess) -> None:
    secret, key_id = new_key(gateway)
    uncut = uncut_text(gateway)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=secret, max_retries=0)
    request_id = f"res-s-{uuid.uuid4().hex[:10]}"
    stream = client.chat.completions.create(model="rec", messages=USER, max_tokens=MAX_TOKENS, stream=True,  # type: ignore[arg-type]
                                            stream_options={"include_usage": True}, extra_body=ORDER,
                                            extra_headers={"x-request-id": request_id})
    chunks = list(stream)
    tokens = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert "".join(tokens) == uncut  # the same answer, cut where max_tokens cuts it ...
    assert len(tokens) == MAX_TOKENS and finish == ["length"]  # ... not 20 + 50 tokens
    assert len(usage) == 1 and usage[0].completion_tokens == MAX_TOKENS  # every token received, once
    assert usage[0].prompt_tokens > 0 and usage[0].total_tokens == usage[0].prompt_tokens + MAX_TOKENS
    line = log_line(gateway, request_id)
    assert line["status"] == 200 and line["endpoint"] == "prefix"
    check_bill(gateway, key_id, line)


def test_unary_recovery_keeps_max_tokens_usage_headers_and_the_bill(gateway: GatewayProcess) -> None:
    secret, key_id = new_key(gateway)
    uncut = uncut_text(gateway)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=secret, max_retries=0)
    request_id = f"res-u-{uuid.uuid4().hex[:10]}"
    raw = client.chat.completions.with_raw_response.create(model="rec", messages=USER,  # type: ignore[arg-type]
                                                           max_tokens=MAX_TOKENS, extra_body=ORDER,
                                                           extra_headers={"x-request-id": request_id})
    assert raw.headers["x-ultraroute-fallback"] == "cut->prefix (stream_broken)"
    assert raw.headers["x-ultraroute-attempts"] == "2" and raw.headers["x-ultraroute-endpoint"] == "prefix"
    completion = raw.parse()
    text = completion.choices[0].message.content or ""
    assert text == uncut and len(text.split()) == MAX_TOKENS
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == MAX_TOKENS
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + MAX_TOKENS
    line = log_line(gateway, request_id)
    assert line["status"] == 200 and line["endpoint"] == "prefix"
    check_bill(gateway, key_id, line)


def test_nothing_left_of_max_tokens_ends_with_length_rather_than_continuing(gateway: GatewayProcess,
                                                                             sim: SimProcess) -> None:
    """A stream that breaks once max_tokens tokens have arrived is not continued: it ends there."""
    secret, _ = new_key(gateway)
    client = openai.OpenAI(base_url=gateway.base_url, api_key=secret, max_retries=0)
    before = sim.stats("prefix")["requests"]
    stream = client.chat.completions.create(model="rec", messages=USER, max_tokens=CUT_AFTER, stream=True,  # type: ignore[arg-type]
                                            stream_options={"include_usage": True}, extra_body=ORDER)
    chunks = list(stream)
    tokens = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    usage = [c.usage for c in chunks if c.usage is not None]
    assert len(tokens) == CUT_AFTER and finish == ["length"]
    assert len(usage) == 1 and usage[0].completion_tokens == CUT_AFTER
    assert sim.stats("prefix")["requests"] == before  # no continuation asked for zero tokens
