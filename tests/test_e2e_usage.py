"""End to end: usage when the upstream sends none (issue 13, item 4).

llama.cpp's server ignores `stream_options.include_usage`; the simulator's `ignore_include_usage`
does the same. The gateway then computes usage itself -- output tokens from what it relayed, input
tokens from the request -- says so (`"estimated": true` in the usage object, `usage_estimated` in
the `ultraroute` metadata and the access log), and charges the client's key for it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import httpx
import openai
import orjson
import pytest

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

ADMIN_KEY = "admin-" + "u" * 30
PROFILE = {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 2000, "output_tokens": 8,
           "faults": {"ignore_include_usage": True}}
USER = [{"role": "user", "content": "Count the words of this sentence, please, all of them."}]
PROMPT_TOKENS = -(-len(USER[0]["content"]) // 4)  # the estimate: ~4 characters a token
METADATA = {"x-ultraroute-metadata": "enabled"}


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    with SimProcess(make_sim_config({"llama": dict(PROFILE), "marked": dict(PROFILE)})) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(sim: SimProcess) -> Iterator[tuple[GatewayProcess, str, str]]:
    # Input tokens only cost anything here: what the key is charged comes from the estimate alone.
    price = {"input": 1000.0, "output": 0.0}
    catalogue = catalogue_for(sim, {"m": [{"sim": "llama", "price": price}],
                                    "quiet": [{"sim": "marked", "price": price, "stream_usage": False}]},
                              gateway={"redis_key_prefix": f"usage-{uuid.uuid4().hex[:8]}"})
    gw = GatewayProcess(catalogue, open_access=False, env={"ULTRAROUTE_ADMIN_KEY": ADMIN_KEY})
    key = gw.create_key()
    key_id = gw.keys("list").stdout.split("key_", 1)[1].split()[0]
    with gw:
        yield gw, key, f"key_{key_id}"


def spend(gw: GatewayProcess, key_id: str) -> float:
    reply = httpx.get(f"{gw.url}/admin/keys/{key_id}/spend", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    return float(reply.json()["spend_usd"])


def test_usage_is_estimated_for_json_and_streaming_clients(gateway: tuple[GatewayProcess, str, str]) -> None:
    gw, key, key_id = gateway
    client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
    before = spend(gw, key_id)

    completion = client.chat.completions.create(model="m", messages=USER, extra_headers=METADATA)
    usage = completion.usage
    assert usage is not None and usage.completion_tokens == 8  # the tokens relayed
    assert usage.prompt_tokens == PROMPT_TOKENS and usage.total_tokens == PROMPT_TOKENS + 8
    assert usage.model_extra == {"estimated": True}
    assert completion.model_extra["ultraroute"]["usage_estimated"] is True

    chunks = list(client.chat.completions.create(model="m", messages=USER, stream=True, extra_headers=METADATA,
                                                 stream_options={"include_usage": True}))
    [with_usage] = [c for c in chunks if c.usage is not None]
    assert not with_usage.choices and with_usage.usage.completion_tokens == 8  # type: ignore[union-attr]
    assert with_usage.usage.model_extra == {"estimated": True}  # type: ignore[union-attr]
    assert chunks[-1].model_extra["ultraroute"]["usage_estimated"] is True  # the metadata trailer

    quiet = list(client.chat.completions.create(model="m", messages=USER, stream=True))
    assert all(c.usage is None for c in quiet)  # not asked for: none sent

    time.sleep(0.5)
    # Three requests' estimated input tokens at $1000 per 1M: what the key was charged.
    assert spend(gw, key_id) - before == pytest.approx(3 * PROMPT_TOKENS * 1000 / 1e6, rel=1e-6)
    lines = [orjson.loads(line) for line in gw.logs().splitlines() if line.startswith('{"ts"')]
    served = [line for line in lines if line.get("key") == key_id]
    assert len(served) >= 3 and all(line["usage_estimated"] for line in served)
    assert all(line["tokens"]["input"] == PROMPT_TOKENS for line in served)


def test_an_endpoint_marked_without_stream_usage_is_not_asked(gateway: tuple[GatewayProcess, str, str]) -> None:
    gw, key, _ = gateway
    client = openai.OpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
    for model in ("m", "quiet"):
        completion = client.chat.completions.create(model=model, messages=USER)
        assert completion.usage is not None and completion.usage.model_extra == {"estimated": True}
    logs = gw.logs()
    assert "endpoint m/llama sent no usage" in logs  # told once, so the operator can mark it ...
    assert "quiet/marked sent no usage" not in logs  # ... and once marked, it is expected
