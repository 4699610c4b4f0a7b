"""End to end past the gateway's own capacity: 200 concurrent requests, `max_in_flight: 8`, and an
upstream that answers at once (so the gateway is the only bottleneck).

Every request is served or refused at once with 503 `overloaded` and `retry-after`, never a 504;
the upstream is not blamed: no failed attempt recorded, its circuit stays closed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for
from tests.scrape import metric_value

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
            assert err.response.headers["x-should-retry"] == "true", err.response.headers  # the SDK may retry
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


def test_an_overloaded_refusal_comes_before_authentication_and_invites_a_retry() -> None:
    """With the one place taken, a stranger's request (a wrong key, or none) is refused 503 `overloaded`
    with `x-should-retry: true` -- not 401: the key is not even looked at -- and once there is room
    again, the same stranger gets its 401."""
    slow = {**ZERO_DELAY, "ttft_ms": 3000}
    with SimProcess(make_sim_config({"slow": slow})) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "slow", "id": "slow"}]}, gateway={"max_in_flight": 1})
        gw = GatewayProcess(catalogue, open_access=False)
        key = gw.create_key()
        with gw:
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            held: list[int] = []  # the status of the request holding the place, read in this thread
            holder = threading.Thread(target=lambda: held.append(httpx.post(
                f"{gw.base_url}/chat/completions", json=body, headers={"authorization": f"Bearer {key}"},
                timeout=30).status_code))
            holder.start()
            deadline = time.monotonic() + 20
            while sim.stats("slow")["requests"] < 1:  # the holder is in flight at the upstream
                assert time.monotonic() < deadline, gw.logs()[-2000:]
                time.sleep(0.02)
            refusals = []
            for headers in ({"authorization": "Bearer ur-wrong"}, {}):
                refusals.append(httpx.post(f"{gw.base_url}/chat/completions", json=body, headers=headers, timeout=10))
            stranger = openai.OpenAI(base_url=gw.base_url, api_key="ur-wrong", max_retries=0)
            with pytest.raises(openai.APIStatusError) as caught:
                stranger.chat.completions.create(**body)  # type: ignore[call-overload]
            holder.join(timeout=30)
            assert held == [200]
            for r in [*refusals, caught.value.response]:
                assert r.status_code == 503 and r.json()["error"]["code"] == "overloaded", r.text
                assert r.headers["x-should-retry"] == "true" and r.headers["retry-after"] == "1", r.headers
            text = httpx.get(f"{gw.url}/metrics").text
            assert metric(text, "ultraroute_rejected_requests_total", reason="overloaded") == 3
            assert metric_value(text, "ultraroute_rejected_requests_total", reason="unauthenticated") == 0
            with pytest.raises(openai.AuthenticationError):  # room again: now the key is checked
                stranger.chat.completions.create(**body)  # type: ignore[call-overload]
