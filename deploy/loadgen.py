"""Demo traffic for `docker compose --profile demo up`: a steady mix of requests through the balancer,
and now and then an outage of the ultrafast tier so the dashboards show fallbacks.

Does: send chat completions (streaming and not, every speed, both demo models) at a few requests per
second, and toggle `error_rate` on the simulator's `fireworks-ultrafast` endpoint through its admin API.
Does not: measure anything itself (that is the dashboards' job) or run against real providers.
Settings from the environment: GATEWAY_URL, SIM_ADMIN_URL, CONCURRENCY, OUTAGE_EVERY_S, OUTAGE_S.
"""

from __future__ import annotations

import asyncio
import os
import random
import time

import httpx

GATEWAY_URL = os.environ.get("GATEWAY_URL", "http://lb:8080/v1")
SIM_ADMIN_URL = os.environ.get("SIM_ADMIN_URL", "http://simulator:9100")
CONCURRENCY = int(os.environ.get("CONCURRENCY", "4"))
OUTAGE_EVERY_S = float(os.environ.get("OUTAGE_EVERY_S", "300"))
OUTAGE_S = float(os.environ.get("OUTAGE_S", "60"))
OUTAGE_ENDPOINT = "fireworks-ultrafast"
PROMPTS = ("Write a haiku about fast inference.", "Summarise the plot of Hamlet in two lines.",
           "Explain a hash map to a child.", "List three uses of a load balancer.")


def body() -> dict[str, object]:
    model, speed = random.choice([("deepseek-v4.1-flash", "ultrafast"), ("deepseek-v4.1-flash", "fast"),
                                  ("deepseek-v4.1-flash", None), ("gpt-oss-120b", "fast"), ("gpt-oss-120b", None)])
    request: dict[str, object] = {"model": model, "max_tokens": 64, "stream": random.random() < 0.5,
                                  "messages": [{"role": "user", "content": random.choice(PROMPTS)}]}
    if speed:
        request["speed"] = speed
    return request


async def worker(client: httpx.AsyncClient) -> None:
    while True:
        try:
            response = await client.post("/chat/completions", json=body())
            await response.aread()
        except httpx.HTTPError:
            await asyncio.sleep(1)  # the stack is still starting, or a replica restarts
        await asyncio.sleep(random.uniform(0.1, 0.6))


async def outages(admin: httpx.AsyncClient) -> None:
    while True:
        await asyncio.sleep(OUTAGE_EVERY_S)
        for rate, wait in ((1.0, OUTAGE_S), (0.0, 0.0)):
            try:
                await admin.patch(f"/admin/endpoints/{OUTAGE_ENDPOINT}", json={"faults": {"error_rate": rate}})
                print(f"{time.strftime('%H:%M:%S')} {OUTAGE_ENDPOINT} error_rate={rate}", flush=True)
            except httpx.HTTPError as err:
                print(f"simulator admin unreachable: {err}", flush=True)
            await asyncio.sleep(wait)


async def main() -> None:
    async with httpx.AsyncClient(base_url=GATEWAY_URL, timeout=120) as client, \
            httpx.AsyncClient(base_url=SIM_ADMIN_URL, timeout=10) as admin:
        await asyncio.gather(outages(admin), *(worker(client) for _ in range(CONCURRENCY)))


if __name__ == "__main__":
    asyncio.run(main())
