"""End to end past the gateway's own capacity: 200 concurrent requests, `max_in_flight: 8`, and an
upstream that answers at once (so the gateway is the only bottleneck).

Every request is served or refused at once with 503 `overloaded` and `retry-after`, never a 504;
the upstream is not blamed: no failed attempt recorded, its circuit stays closed.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import httpx
import openai
from prometheus_client.parser import text_string_to_metric_families

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

N = 200
ZERO_DELAY = {"ttft_ms": 0, "ttft_jitter": 0, "tokens_per_second": 1_000_000, "output_tokens": 4,
              "capacity": 100_000}


async def one(client: openai.AsyncOpenAI, i: int) -> str:
    """'ok', or 'overloaded' after checking the refusal's shape; anything else is returned as is."""
    body = {"model": "m", "messages": [{"role": "user", "content": f"hi {i}"}], "max_tokens": 4}
    try:
        if i % 2:
            stream = await client.chat.completions.create(**body, stream=True)
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        else:
            text = (await client.chat.completions.create(**body)).choices[0].message.content or ""
    except openai.APIStatusError as err:
        if err.status_code == 503 and err.code == "overloaded":
            assert err.response.headers["retry-after"] == "1", err.response.headers
            assert err.type == "server_error" and "overloaded" in err.message
            return "overloaded"
        return f"http-{err.status_code}-{err.code}"
    return "ok" if text else "empty"


async def storm(base_url: str) -> Counter[str]:
    # No SDK retries: each refusal is seen. Enough connections that all 200 arrive together.
    http = httpx.AsyncClient(limits=httpx.Limits(max_connections=N), timeout=30)
    async with openai.AsyncOpenAI(base_url=base_url, api_key="unused", max_retries=0, http_client=http) as client:
        return Counter(await asyncio.gather(*(one(client, i) for i in range(N))))


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"{name} {labels} not exported")


def test_past_max_in_flight_requests_are_refused_at_once_and_no_provider_is_blamed() -> None:
    with SimProcess(make_sim_config({"zero": ZERO_DELAY})) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "zero", "id": "zero"}]}, gateway={"max_in_flight": 8})
        with GatewayProcess(catalogue) as gw:
            outcomes = asyncio.run(storm(gw.base_url))
            assert set(outcomes) == {"ok", "overloaded"}, outcomes  # and so never a 504
            assert sum(outcomes.values()) == N

            text = httpx.get(f"{gw.url}/metrics").text
            assert metric(text, "ultraroute_overloaded_total") == outcomes["overloaded"]
            assert metric(text, "ultraroute_rejected_requests_total", reason="overloaded") == outcomes["overloaded"]
            endpoint = {"model": "m", "endpoint": "zero"}
            assert metric(text, "ultraroute_endpoint_circuit_open", **endpoint) == 0
            assert metric(text, "ultraroute_requests_total", **endpoint, status="ok") == outcomes["ok"]
            for family in text_string_to_metric_families(text):  # no failed attempt of any kind
                for sample in family.samples:
                    if sample.name == "ultraroute_requests_total" and sample.labels["status"] != "ok":
                        assert sample.value == 0, sample
            stats = httpx.get(f"{gw.url}/v1/endpoints").json()["data"][0]["stats"]
            assert stats["errors"] == 0 and stats["ok"] == outcomes["ok"], stats
            assert metric(text, "ultraroute_event_loop_lag_seconds_count") > 0
            # Once the storm has passed, there is room again: nothing leaked in the count.
            client = openai.OpenAI(base_url=gw.base_url, api_key="unused", max_retries=0)
            for _ in range(10):
                assert client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
