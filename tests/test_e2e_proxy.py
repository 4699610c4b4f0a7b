"""End to end: the official `openai` SDK -> a gateway process -> simulated providers, over loopback.

Covers issue "Foundation": non-streaming, streaming with and without `include_usage`, the SDK's
typed errors, upstream errors passed on, request ids, headers naming what served, and a client
disconnect cancelling the upstream.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

USER = [{"role": "user", "content": "Tell me about routing."}]


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    config = make_sim_config({
        "std": {"ttft_ms": 50, "ttft_jitter": 0, "tokens_per_second": 500, "output_tokens": 24,
                "reasoning_tokens": 4, "context_length": 500},
        "slow": {"ttft_ms": 3000, "tokens_per_second": 50, "output_tokens": 400},
        "broken": {"ttft_ms": 20, "faults": {"error_rate": 1.0, "error_status": 503}},
        "backup": {"ttft_ms": 20, "ttft_jitter": 0, "tokens_per_second": 1000, "output_tokens": 8},
    })
    with SimProcess(config) as process:
        yield process


@pytest.fixture(scope="module")
def gateway(sim: SimProcess) -> Iterator[GatewayProcess]:
    catalogue = catalogue_for(sim, {
        "chat-model": [{"sim": "std", "model": "upstream-chat-v1"}],
        "slow-model": [{"sim": "slow"}],
        "broken-model": [{"sim": "broken"}],
        "failover-model": [{"sim": "broken", "id": "broken/fast", "tier": "fast"},
                           {"sim": "backup", "id": "backup/standard"}],
    }, gateway={"max_body_bytes": 4096})
    catalogue["models"]["chat-model"]["aliases"] = ["chat"]
    catalogue["health"] = {"probe": False}  # requests to "broken" are counted: no background probes
    with GatewayProcess(catalogue) as process:
        yield process


@pytest.fixture
def client(gateway: GatewayProcess) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=2)


def test_non_streaming(client: openai.OpenAI, sim: SimProcess) -> None:
    raw = client.chat.completions.with_raw_response.create(model="chat-model", messages=USER,
                                                           temperature=0.1)
    completion = raw.parse()
    assert completion.object == "chat.completion" and completion.model == "chat-model"
    assert completion.choices[0].message.content and completion.choices[0].finish_reason == "stop"
    assert completion.choices[0].message.reasoning_content  # type: ignore[attr-defined]
    assert completion.usage is not None and completion.usage.completion_tokens == 28
    assert completion.usage.completion_tokens_details.reasoning_tokens == 4
    assert raw.headers["x-ultraroute-endpoint"] == "std"
    assert raw.headers["x-ultraroute-provider"] == "std"
    assert raw.headers["x-ultraroute-tier"] == "standard"
    assert raw.headers["x-request-id"]
    assert completion.model_extra and completion.model_extra["provider"] == "std"


def test_streaming_with_and_without_usage(client: openai.OpenAI) -> None:
    stream = client.chat.completions.create(model="chat", messages=USER, stream=True,
                                            stream_options={"include_usage": True})
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage_chunks = [c for c in chunks if not c.choices]
    assert len(usage_chunks) == 1 and usage_chunks[0].usage.completion_tokens == 28
    assert all(c.model == "chat-model" for c in chunks)
    same = client.chat.completions.create(model="chat-model", messages=USER)
    assert content == same.choices[0].message.content  # the simulator is deterministic

    plain = list(client.chat.completions.create(model="chat-model", messages=USER, stream=True))
    assert plain and all(c.choices and c.usage is None for c in plain)  # no usage chunk unasked


def test_stream_is_relayed_as_it_arrives(gateway: GatewayProcess) -> None:
    """The first bytes reach the client long before the stream ends: no buffering."""
    body = {"model": "slow-model", "messages": USER, "stream": True, "max_tokens": 100}
    start = time.perf_counter()
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", json=body, timeout=30) as r:
        first_at = None
        for _ in r.iter_raw():
            first_at = first_at or time.perf_counter() - start
        total = time.perf_counter() - start
    assert first_at is not None and 2.5 < first_at < total - 1.0  # 100 tokens at 50 tok/s after it


def test_sdk_typed_errors(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        client.chat.completions.create(model="no-such-model", messages=USER)
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(model="chat-model", messages=[])
    assert bad.value.param == "messages"
    with pytest.raises(openai.BadRequestError) as bad_type:
        client.chat.completions.create(model="chat-model", messages=USER, max_tokens="many")  # type: ignore[arg-type]
    assert bad_type.value.param == "max_tokens"
    r = httpx.post(f"{gateway.base_url}/chat/completions", content=b"{not json",
                   headers={"content-type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
    assert set(r.json()["error"]) == {"message", "type", "code", "param"}
    big = {"model": "chat-model", "messages": [{"role": "user", "content": "x" * 5000}]}
    with pytest.raises(openai.APIStatusError) as too_large:
        client.chat.completions.create(**big)  # type: ignore[arg-type]
    assert too_large.value.status_code == 413


def test_upstream_error_is_passed_on_without_sdk_retries(client: openai.OpenAI, sim: SimProcess) -> None:
    before = sim.stats("broken")["requests"]
    with pytest.raises(openai.InternalServerError) as err:
        client.chat.completions.create(model="broken-model", messages=USER)
    assert err.value.status_code == 503
    assert err.value.response.headers["x-should-retry"] == "false"
    # The SDK would retry a 503 twice; x-should-retry: false stops it multiplying the load.
    assert sim.stats("broken")["requests"] - before == 1


def test_context_length_error_passes_through(client: openai.OpenAI, sim: SimProcess) -> None:
    before = sim.stats("std")["requests"]
    long = [{"role": "user", "content": "word " * 700}]  # ~880 tokens: over the endpoint's 500
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="chat-model", messages=long)
    assert err.value.code == "context_length_exceeded"
    assert sim.stats("std")["requests"] - before == 1  # a client error is not retried


def test_failover_reports_what_served(client: openai.OpenAI) -> None:
    raw = client.chat.completions.with_raw_response.create(model="failover-model", messages=USER,
                                                           extra_body={"speed": "fast"})
    assert raw.headers["x-ultraroute-endpoint"] == "backup/standard"
    assert raw.headers["x-ultraroute-attempts"] == "2"
    assert raw.headers["x-ultraroute-fallback"].startswith("broken/fast->backup/standard")


def test_request_id_echoed_or_generated(gateway: GatewayProcess) -> None:
    r = httpx.get(f"{gateway.url}/v1/models", headers={"x-request-id": "abc-123"})
    assert r.headers["x-request-id"] == "abc-123"
    r = httpx.get(f"{gateway.url}/v1/models", headers={"x-request-id": "bad id\twith junk"})
    assert r.headers["x-request-id"] != "bad id\twith junk" and len(r.headers["x-request-id"]) == 24
    missing = httpx.get(f"{gateway.url}/nope")
    assert missing.status_code == 404 and missing.headers["x-request-id"]
    assert missing.json()["error"]["type"] == "invalid_request_error"


def test_models_list(client: openai.OpenAI) -> None:
    models = {m.id: m for m in client.models.list()}
    assert set(models) == {"chat-model", "slow-model", "broken-model", "failover-model"}
    assert models["chat-model"].model_extra["aliases"] == ["chat"]


def cancelled_within(sim: SimProcess, before: int, hung_up: float) -> float:
    """Seconds from the client hanging up (wall clock) to the simulator seeing its request cancelled."""
    stats = sim.wait_for("slow", lambda s: s["cancelled"] > before, timeout=10)
    attempt = next(a for a in reversed(stats["attempts"]) if a["cancelled"])
    return attempt["t"] + attempt["duration_ms"] / 1000 - hung_up


def test_stream_disconnect_cancels_upstream(gateway: GatewayProcess, sim: SimProcess) -> None:
    before = sim.stats("slow")["cancelled"]
    body = {"model": "slow-model", "messages": USER, "stream": True}
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", json=body, timeout=30) as r:
        for _ in r.iter_raw():
            break  # the first token arrived; hang up mid-stream
    hung_up = time.time()
    assert cancelled_within(sim, before, hung_up) < 1.0  # the stream had ~8 s to go


def test_non_streaming_disconnect_cancels_upstream(gateway: GatewayProcess, sim: SimProcess) -> None:
    before = sim.stats("slow")["cancelled"]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{gateway.base_url}/chat/completions", timeout=0.5,
                   json={"model": "slow-model", "messages": USER})
    hung_up = time.time()
    assert cancelled_within(sim, before, hung_up) < 1.0  # its first token was still ~2.5 s away


def test_stream_metadata_trailer(client: openai.OpenAI, gateway: GatewayProcess) -> None:
    """`x-ultraroute-metadata: enabled` on a stream: one last chunk before `[DONE]` carries the
    `ultraroute` object (plan, attempts, what served); without the header, no chunk does."""
    meta = {"x-ultraroute-metadata": "enabled"}
    chunks = list(client.chat.completions.create(model="failover-model", messages=USER, stream=True,
                                                 stream_options={"include_usage": True},
                                                 extra_body={"speed": "fast"}, extra_headers=meta))
    carrying = [c for c in chunks if (c.model_extra or {}).get("ultraroute")]
    assert carrying == [chunks[-1]] and chunks[-1].choices == [], chunks[-3:]
    assert chunks[-2].usage is not None and "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    trailer = chunks[-1].model_extra["ultraroute"]
    assert trailer["served"] == "backup/standard" and trailer["model"] == "failover-model"
    assert [c["id"] for c in trailer["candidates"]] == ["broken/fast", "backup/standard"]
    assert [(a["endpoint"], a["status"]) for a in trailer["attempts"]] == [("broken/fast", 503)]
    with httpx.stream("POST", f"{gateway.base_url}/chat/completions", headers=meta,
                      json={"model": "chat-model", "messages": USER, "stream": True}) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]" and '"ultraroute"' in events[-2]
    assert not any('"ultraroute"' in e for e in events[:-2])
    plain = list(client.chat.completions.create(model="chat-model", messages=USER, stream=True))
    assert plain and not any((c.model_extra or {}).get("ultraroute") for c in plain)
