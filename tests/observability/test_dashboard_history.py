"""The live page, opened after minutes of traffic, draws those minutes at once (headless Chromium).

"Before the page was opened" is made real without waiting: a replica that has been serving for the
last 2.5 minutes recorded its samples (with their real, past timestamps) in the shared Redis, through
the gateway's own `RedisStore`. A new gateway replica on the same Redis then serves
`/v1/endpoints/history` from its windows, and the page, opened once, must draw lines that span
those minutes, plus the live traffic of this replica.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import httpx

from gateway.simulator.testing import SimProcess, make_sim_config
from gateway.telemetry import AttemptSample, Outcome, RedisStore
from tests.harness import GatewayProcess, catalogue_for
from tests.observability.servers import chromium
from tests.test_e2e_routing import burst, served

PAST_S = 150  # the traffic before the page opens: 2.5 minutes, 2 requests per 10 s bucket
USER = [{"role": "user", "content": "Hello"}]


async def _earlier_traffic(redis_url: str, prefix: str) -> None:
    store = RedisStore(redis_url, replica_id="earlier-replica", key_prefix=f"{prefix}:tel", flush_interval_s=0.1)
    await store.start()
    now = time.time()
    for i in range(PAST_S // 5):
        started = now - PAST_S + 5 * i
        store.record(AttemptSample(endpoint_key="m/fast", started_at=started, outcome=Outcome.OK, status=200,
                                   ttft_s=0.2 + 0.01 * (i % 5), ttfat_s=0.2, decode_tps=300.0 + i, e2e_s=0.5,
                                   output_tokens=20))
    await store.stop()  # the final flush


def _history(gw: GatewayProcess) -> dict[str, list[dict[str, float]]]:
    body = httpx.get(f"{gw.base_url}/endpoints/history", timeout=30).json()
    assert body["bucket_s"] == 10 and body["window_s"] == 1800
    return {e["key"]: e["points"] for e in body["data"]}


def test_page_opened_after_minutes_of_traffic_draws_them(redis_url: str) -> None:
    prefix = f"test-history-{uuid.uuid4().hex[:8]}"
    asyncio.run(_earlier_traffic(redis_url, prefix))
    profile = {"ttft_ms": 50, "ttft_jitter": 0, "tokens_per_second": 400, "output_tokens": 10}
    with SimProcess(make_sim_config({"fast": profile, "std": profile})) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "fast", "tier": "fast"}, {"sim": "std"}]},
                                  gateway={"redis_key_prefix": prefix, "telemetry_flush_s": 0.2})
        with GatewayProcess(catalogue, env={"REDIS_URL": redis_url}) as gw:
            deadline = time.monotonic() + 20
            while len(_history(gw)["m/fast"]) < PAST_S // 10:  # until the refresh has read the old buckets
                assert time.monotonic() < deadline, _history(gw)
                time.sleep(0.2)
            only_std = {"model": "m", "messages": USER, "provider": {"only": ["std"]}}
            served(asyncio.run(burst(gw.base_url, [only_std] * 4, 2)))  # this replica's own, live traffic
            history = _history(gw)
            page = chromium(f"{gw.url}/dashboard?interval=500", ["--dump-dom"])
    past = history["m/fast"]
    assert [p["t"] % 10 for p in past] == [0] * len(past) and past == sorted(past, key=lambda p: p["t"])
    assert sum(p["requests"] for p in past) == PAST_S // 5 and max(p["t"] for p in past) - past[0]["t"] >= 130
    assert all(p["decode_tps"] and p["ttft_ms"] for p in past)
    assert sum(p["requests"] for p in history["m/std"]) == 4

    assert page.returncode == 0, page.stderr[-2000:]
    tps_chart = re.search(r'<svg id="chart-tps".*?</svg>', page.stdout, re.S)
    assert tps_chart, page.stdout[-2000:]
    lines = {m["key"]: (int(m["points"]), int(m["span"])) for m in re.finditer(
        r'<polyline[^>]*data-key="(?P<key>[^"]+)"[^>]*data-points="(?P<points>\d+)"[^>]*data-span-s="(?P<span>\d+)"',
        tps_chart.group(0))}
    points, span = lines["m/fast"]
    assert span >= 120 and points >= PAST_S // 10, lines  # the minutes before the page was opened
    assert "m/std" in lines, lines  # and the live traffic
