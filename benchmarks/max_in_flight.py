"""How many requests in flight one worker sustains: the measurement behind `gateway.max_in_flight`.

Run by hand: `.venv/bin/python benchmarks/max_in_flight.py [levels...]`. One gateway process (one
worker, admission off) in front of a simulated endpoint that streams like a real one (TTFT 200 ms,
40 tokens at 100 tok/s, one write per 50 ms tick: ~0.6 s per request). For each concurrency level a
closed loop of raw-socket clients (cheap: they only look for the end of the chunked body) keeps that
many streams in flight for a few seconds. Printed per level: completed requests/s, the client's TTFT
p50/p99 (the simulator adds 200 ms; the rest is queueing), the gateway's event-loop lag p99 (from
`ultraroute_event_loop_lag_seconds`), the gateway's CPU use and CPU per request, and from that what
one saturated core would sustain: requests/s, and (Little's law, with the profile's ~0.6 s per
request) requests in flight. Where the lag p99 passes ~100 ms, the worker is saturated: every request
it takes on beyond that waits for the loop. On a machine shared with other work the lag and TTFT
columns show that contention too; CPU per request is the steadier figure.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

PROFILE = {"ttft_ms": 200, "ttft_jitter": 0, "tokens_per_second": 100, "output_tokens": 40, "tick_ms": 50,
           "slowdown_per_user": 0, "capacity": 100_000}
UPSTREAM_S = 0.2 + 39 / 100  # the profile's own time per request: TTFT, then 39 more tokens
SECONDS = 6.0
BODY = b'{"model":"m","stream":true,"max_tokens":40,"messages":[{"role":"user","content":"hi"}]}'


async def client(port: int, until: float, ttfts: list[float], done: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {len(BODY)}\r\n\r\n").encode() + BODY
    try:
        while time.monotonic() < until:
            sent = time.monotonic()
            writer.write(head)
            first = None
            tail = b""
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                if first is None and b"data: " in data:
                    first = time.monotonic() - sent
                tail = (tail + data)[-16:]
                if tail.endswith(b"0\r\n\r\n"):
                    break
            if first is not None:
                ttfts.append(first)
            done.append(1)
    finally:
        writer.close()


def lag_buckets(url: str) -> dict[float, float]:
    text = httpx.get(f"{url}/metrics").text
    for family in text_string_to_metric_families(text):
        if family.name == "ultraroute_event_loop_lag_seconds":
            return {float(s.labels["le"]): s.value for s in family.samples if s.name.endswith("_bucket")}
    return {}


def p99_from(before: dict[float, float], after: dict[float, float]) -> float:
    counts = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    total = counts[-1][1]
    for le, n in counts:
        if n >= 0.99 * total:
            return le
    return float("inf")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def level(port: int, n: int) -> tuple[float, list[float]]:
    ttfts: list[float] = []
    done: list[int] = []
    until = time.monotonic() + SECONDS
    await asyncio.gather(*(client(port, until, ttfts, done) for _ in range(n)))
    return len(done) / SECONDS, ttfts


def main(levels: list[int]) -> None:
    with SimProcess(make_sim_config({"s": PROFILE})) as sim:
        catalogue = catalogue_for(sim, {"m": [{"sim": "s", "id": "s"}]}, gateway={"max_in_flight": 1_000_000})
        with GatewayProcess(catalogue, log_level="warning") as gw:
            assert gw.proc is not None
            print(f"{'in flight':>9} {'req/s':>7} {'TTFT p50':>9} {'TTFT p99':>9} {'lag p99':>8} {'gw CPU':>7} "
                  f"{'CPU/req':>8} {'one core: req/s, in flight':>27}")
            for n in levels:
                before, cpu0, t0 = lag_buckets(gw.url), cpu_s(gw.proc.pid), time.monotonic()
                rate, ttfts = asyncio.run(level(gw.port, n))
                cpu = (cpu_s(gw.proc.pid) - cpu0) / (time.monotonic() - t0)
                lag = p99_from(before, lag_buckets(gw.url))
                q = statistics.quantiles(ttfts, n=100) if len(ttfts) > 1 else [float("nan")] * 99
                per_request = cpu / rate if rate else float("nan")
                # Little's law: a saturated core completes 1/per_request streams/s, each lasting
                # ~UPSTREAM_S when nothing queues, so that many are in flight at once.
                print(f"{n:>9} {rate:>7.0f} {q[49] * 1000:>7.0f}ms {q[98] * 1000:>7.0f}ms {lag * 1000:>6.0f}ms "
                      f"{cpu:>6.0%} {per_request * 1000:>6.2f}ms {1 / per_request:>14.0f} "
                      f"{UPSTREAM_S / per_request:>12.0f}", flush=True)


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [64, 256, 512, 1024, 2048])
