"""Microbenchmark: the cost of stages 2-3 (resolve preferences + select) among 200 endpoints.

Run by hand: `.venv/bin/python benchmarks/selection.py`. Builds a catalogue of one model with 200
endpoints over 4 tiers' worth of providers, fills a MemoryStore with samples, and times
`Resolver()` + `Router.plan()` per request for a few preference mixes, as requests arrive: the cached
parts are refreshed every 250 ms, as in the gateway. Prints µs per request (p50 and mean) and, apart,
what one refresh of the ranking costs (every 250 ms per model and preference mix, not per request):
with `sort: throughput` each request re-predicts the head of every tier group at its live load.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.config import GatewayFile, load_catalogue
from gateway.parse import parse_chat_request
from gateway.policy import PolicySet
from gateway.preferences import Resolver
from gateway.routing.router import Router
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import AttemptSample, Outcome

N_ENDPOINTS = 200


def build() -> tuple[Router, MemoryStore]:
    tiers = ["standard", "fast", "ultrafast"]
    providers = {f"p{i}": {"base_url": f"http://p{i}.test/v1", "region": random.choice(["us", "eu"])}
                 for i in range(N_ENDPOINTS)}
    endpoints = [{"provider": f"p{i}", "model": "up", "tier": tiers[i % 3],
                  "price": {"input": random.uniform(0.1, 3), "output": random.uniform(0.3, 10)},
                  "advertised": {"tokens_per_second": random.uniform(50, 1000)}} for i in range(N_ENDPOINTS)]
    path = Path(tempfile.mkdtemp()) / "providers.yaml"
    path.write_text(yaml.safe_dump({"providers": providers, "models": {"m": {"endpoints": endpoints}}}))
    catalogue, _ = load_catalogue(path, env={})
    store = MemoryStore()
    router = Router(catalogue, store)
    for endpoint in catalogue.endpoints():
        for _ in range(5):
            sample = AttemptSample(endpoint.key, time.time(), Outcome.OK, 200, 0.3, 0.3,
                                   random.uniform(50, 1000), 1.0, in_flight_at_start=random.randint(0, 8))
            store.record(sample)
            router.observe(sample)
    return router, store


def main() -> None:
    random.seed(0)
    router, _ = build()
    resolver = Resolver(PolicySet.builtin())
    cases = {
        "default (no sort)": {},
        ":nitro": {"model": "m:nitro"},
        "speed=ultrafast, throughput": {"speed": "ultrafast", "provider": {"sort": "throughput"}},
        "speed=fast, sort=latency": {"speed": "fast", "provider": {"sort": "latency"}},
        "filters + soft threshold": {"provider": {"sort": "price", "regions": ["eu"],
                                                  "preferred_min_throughput": 300}},
        # An agent's turn: a 30k-token prompt whose session's cache is held by one endpoint (stay.py).
        "agent turn, sort=e2e": {"provider": {"sort": "e2e"}, "session_id": "agent-1",
                                 "messages": [{"role": "user", "content": "x" * 120_000}]},
    }
    holder = next(e.key for e in router.catalogue.endpoints() if e.tier.value == "standard")
    router.sessions.remember("agent-1", holder, 29_000)
    print(f"{'preferences':<28}{'p50 µs':>9}{'mean µs':>9}  (resolve + plan, {N_ENDPOINTS} endpoints)")
    for name, extra in cases.items():
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
        if "session_id" in extra:
            router.sessions.remember("agent-1", holder, 29_000)
        request = parse_chat_request(orjson.dumps(body), {}, "r", GatewayFile())
        times = []
        deadline = time.perf_counter() + 2.0
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            router.plan(request, resolver(request, {}))
            times.append(time.perf_counter() - t0)
        print(f"{name:<28}{statistics.median(times) * 1e6:>9.1f}{statistics.mean(times) * 1e6:>9.1f}")
    rebuilds = []
    for _ in range(20):
        router._ranked.clear()
        t0 = time.perf_counter()
        router.plan(request, resolver(request, {}))
        rebuilds.append(time.perf_counter() - t0)
    print(f"one refresh of the ranking (200 endpoints, stats cached): {statistics.median(rebuilds) * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
