"""What the gateway adds: latency and CPU, measured against calling the simulator directly.

Run by hand (not a test): `.venv/bin/python benchmarks/overhead.py [--requests 400]`;
`--recording redis://127.0.0.1:6379/0` instead compares recording off, in memory and through Redis;
`--access` compares open mode with a client key whose limits and budget are all checked.
For concurrency 1 and 50 it sends the same requests straight to a simulated endpoint and through the
gateway, and prints p50/p99 of non-streaming latency and of streaming time to first byte, the
difference (the gateway's overhead), and the gateway process's CPU time per request. The simulator
runs with no jitter, so both paths see the same upstream timing; the machine is shared and noisy, so
compare figures from one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

BODY = {"model": "bench", "max_tokens": 16, "messages": [{"role": "user", "content": "Say something."}]}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def one(client: httpx.AsyncClient, url: str, stream: bool) -> float:
    body = {**BODY, "stream": stream}
    start = time.perf_counter()
    if stream:
        async with client.stream("POST", url, json=body) as r:
            first = 0.0
            async for _ in r.aiter_raw():
                first = first or time.perf_counter() - start
        assert r.status_code == 200
        return first
    r = await client.post(url, json=body)
    assert r.status_code == 200, r.text
    return time.perf_counter() - start


async def run(url: str, stream: bool, concurrency: int, total: int, key: str | None = None) -> list[float]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(limits=limits, timeout=30, headers=headers) as client:
        for _ in range(min(20, total)):  # warm the pools
            await one(client, url, stream)
        out: list[float] = []
        queue = iter(range(total))

        async def worker() -> None:
            for _ in queue:
                out.append(await one(client, url, stream))

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return out


def recording_cost(requests: int, redis_url: str) -> None:
    """Gateway CPU and latency with recording off, in memory, and shared through Redis."""
    sim_cfg = make_sim_config({"bench": {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 4000,
                                         "output_tokens": 16, "capacity": 1000, "slowdown_per_user": 0}})
    print(f"{'recording':<12}{'p50 ms':>9}{'p99 ms':>9}{'CPU/req µs':>12}   (non-streaming, concurrency 8)")
    with SimProcess(sim_cfg) as sim:
        results = {}
        for name, record, env in (("off", False, {}), ("memory", True, {}),
                                  ("redis", True, {"REDIS_URL": redis_url})):
            catalogue = catalogue_for(sim, {"bench": [{"sim": "bench"}]},
                                      gateway={"record_stats": record, "redis_key_prefix": "bench"})
            with GatewayProcess(catalogue, env=env) as gw:
                url = gw.base_url + "/chat/completions"
                asyncio.run(run(url, False, 8, 100))
                cpu0 = cpu_seconds(gw.proc.pid)  # type: ignore[union-attr]
                times = asyncio.run(run(url, False, 8, requests))
                cpu = (cpu_seconds(gw.proc.pid) - cpu0) / (requests + 20)  # type: ignore[union-attr]
            results[name] = cpu
            print(f"{name:<12}{pct(times, .5) * 1000:>9.2f}{pct(times, .99) * 1000:>9.2f}{cpu * 1e6:>12.0f}")
        print(f"Redis recording vs off: {100 * (results['redis'] / results['off'] - 1):+.1f}% CPU per request; "
              f"vs memory: {100 * (results['redis'] / results['memory'] - 1):+.1f}%")


def access_cost(requests: int, rounds: int = 3) -> None:
    """Gateway CPU and latency open (no keys) versus with a client key whose every limit is checked:
    the cost of stage 0 (authenticate, authorize, admit, charge). Rounds alternate to share the noise."""
    sim_cfg = make_sim_config({"bench": {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 4000,
                                         "output_tokens": 16, "capacity": 1000, "slowdown_per_user": 0}})
    print(f"{'access':<12}{'p50 ms':>9}{'p99 ms':>9}{'CPU/req µs':>12}   (non-streaming, concurrency 8)")
    with SimProcess(sim_cfg) as sim:
        catalogue = catalogue_for(sim, {"bench": [{"sim": "bench"}]})
        keyed = GatewayProcess(catalogue, open_access=False)
        key = keyed.create_key("--models", "bench", "--rpm", "10000000", "--tpm", "10000000000",
                               "--budget", "1000000")
        results: dict[str, list[tuple[float, float, float]]] = {"open": [], "key": []}
        with GatewayProcess(catalogue) as opened, keyed:
            for _ in range(rounds):
                for name, gw, secret in (("open", opened, None), ("key", keyed, key)):
                    url = gw.base_url + "/chat/completions"
                    asyncio.run(run(url, False, 8, 50, secret))
                    cpu0 = cpu_seconds(gw.proc.pid)  # type: ignore[union-attr]
                    times = asyncio.run(run(url, False, 8, requests, secret))
                    cpu = (cpu_seconds(gw.proc.pid) - cpu0) / (requests + 20)  # type: ignore[union-attr]
                    results[name].append((pct(times, .5), pct(times, .99), cpu))
        for name, rows in results.items():
            p50, p99, cpu = (statistics.median(r[i] for r in rows) for i in range(3))
            print(f"{name:<12}{p50 * 1000:>9.2f}{p99 * 1000:>9.2f}{cpu * 1e6:>12.0f}")
        cpu_open, cpu_key = (statistics.median(r[2] for r in results[n]) for n in ("open", "key"))
        print(f"client keys vs open: {(cpu_key - cpu_open) * 1e6:+.0f} µs CPU per request "
              f"({100 * (cpu_key / cpu_open - 1):+.1f}%), medians of {rounds} alternating rounds")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--recording", metavar="REDIS_URL", help="compare recording off / memory / Redis")
    parser.add_argument("--access", action="store_true", help="compare open mode / a client key with limits")
    args = parser.parse_args()
    if args.access:
        access_cost(args.requests)
        return
    if args.recording:
        recording_cost(args.requests, args.recording)
        return
    sim_cfg = make_sim_config({"bench": {"ttft_ms": 5, "ttft_jitter": 0, "tokens_per_second": 4000,
                                         "output_tokens": 16, "capacity": 1000, "slowdown_per_user": 0}})
    with SimProcess(sim_cfg) as sim:
        catalogue = catalogue_for(sim, {"bench": [{"sim": "bench"}]})
        with GatewayProcess(catalogue) as gw:
            direct = sim.base_url("bench") + "/chat/completions"
            via = gw.base_url + "/chat/completions"
            print(f"{'mode':<22}{'conc':>5}{'direct p50':>12}{'gw p50':>10}{'added p50':>11}"
                  f"{'direct p99':>12}{'gw p99':>10}{'added p99':>11}{'gw CPU/req':>12}")
            for stream in (False, True):
                for concurrency in (1, 50):
                    d = asyncio.run(run(direct, stream, concurrency, args.requests))
                    cpu0 = cpu_seconds(gw.proc.pid)  # type: ignore[union-attr]
                    g = asyncio.run(run(via, stream, concurrency, args.requests))
                    cpu = (cpu_seconds(gw.proc.pid) - cpu0) / (args.requests + 20)  # type: ignore[union-attr]
                    mode = "stream: first byte" if stream else "non-stream: latency"
                    ms = 1000
                    print(f"{mode:<22}{concurrency:>5}{pct(d, .5) * ms:>10.2f}ms{pct(g, .5) * ms:>8.2f}ms"
                          f"{(pct(g, .5) - pct(d, .5)) * ms:>9.2f}ms{pct(d, .99) * ms:>10.2f}ms"
                          f"{pct(g, .99) * ms:>8.2f}ms{(pct(g, .99) - pct(d, .99)) * ms:>9.2f}ms"
                          f"{cpu * 1e6:>9.0f} µs")



if __name__ == "__main__":
    main()
