"""Hedging: p99 TTFT with 5% of first tokens stalled, with and without `provider.hedge_after_ms`.

Run by hand: `.venv/bin/python benchmarks/hedging.py [--requests 400]`. Two simulated endpoints of
one model (TTFT 150 ms); on the first, 5% of requests hang before their first token. Without hedging
such a request waits for the first-token budget (fixed at 3 s here) and then fails over; with
`hedge_after_ms: 400`, the next endpoint is started after 400 ms and the first token wins. Prints
TTFT p50/p95/p99 measured at the client (streaming, concurrency 8) and the p99 ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def ttfts(url: str, body: dict[str, Any], total: int, concurrency: int) -> list[float]:
    out: list[float] = []
    queue = iter(range(total))
    async with httpx.AsyncClient(timeout=30, limits=httpx.Limits(max_connections=concurrency)) as client:
        async def worker() -> None:
            for _ in queue:
                start = time.perf_counter()
                async with client.stream("POST", url, json=body) as r:
                    first = 0.0
                    async for _ in r.aiter_raw():
                        first = first or time.perf_counter() - start
                out.append(first)

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    args = parser.parse_args()
    profile = {"ttft_ms": 150, "ttft_jitter": 0.1, "tokens_per_second": 1000, "output_tokens": 10}
    config = make_sim_config({"a": {**profile, "faults": {"hang_rate": 0.05}}, "b": dict(profile)})
    with SimProcess(config) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "a", "id": "a", "first_token_budget_s": 3.0},
                                              {"sim": "b", "id": "b"}]},
                                  gateway={"breaker_failures": 1000})  # keep the stalling endpoint in play
        with GatewayProcess(catalogue) as gw:
            url = gw.base_url + "/chat/completions"
            base = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                    "provider": {"order": ["a", "b"]}}
            hedged = {**base, "provider": {"order": ["a", "b"], "hedge_after_ms": 400}}
            print(f"{'mode':<14}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
            results = {}
            for name, body in (("no hedging", base), ("hedge 400 ms", hedged)):
                values = asyncio.run(ttfts(url, body, args.requests, 8))
                results[name] = pct(values, 0.99)
                print(f"{name:<14}{pct(values, .5) * 1000:>9.0f}{pct(values, .95) * 1000:>9.0f}"
                      f"{pct(values, .99) * 1000:>9.0f}")
            print(f"p99 TTFT cut {results['no hedging'] / results['hedge 400 ms']:.1f}x by hedging "
                  f"(extra attempts at b: {sim.stats('b')['requests']})")


if __name__ == "__main__":
    main()
