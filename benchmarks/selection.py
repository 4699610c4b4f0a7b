"""Microbenchmark: the cost of stages 2-3 (resolve preferences + select) among 200 endpoints.

Run by hand: `.venv/bin/python benchmarks/selection.py`. Builds a catalogue of one model with 200
endpoints over 4 tiers' worth of providers, fills a MemoryStore with samples, and times
`Resolver()` + `Router.plan()` per request for a few preference mixes, as requests arrive: the cached
parts are refreshed every 250 ms, as in the gateway. Prints µs per request (p50 and mean) and, apart,
what one refresh of the ranking costs (every 250 ms per model and preference mix, not per request):
with `sort: throughput` each request re-predicts the head of every tier group at its live load.

`--instructions [CHECKOUT ...]` counts instead, under valgrind (load-independent, unlike the times):
instructions per request of each mix, for each CHECKOUT (a directory holding `gateway/`; default this
one), the ranking kept fresh (a clock that stands still) so that only the per-request part is counted.
Needs valgrind and gcc (first_write.py builds the library that toggles collection); ~1 min a checkout.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (a `gateway` imported first stays: `_CHILD`)

from gateway.config import GatewayFile, load_catalogue
from gateway.parse import parse_chat_request
from gateway.policy import PolicySet
from gateway.preferences import Resolver
from gateway.routing.router import Router
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import AttemptSample, Outcome

HERE = Path(__file__).resolve().parent
N_ENDPOINTS = 200
# A counted checkout's process: its own gateway first, then this file's scenario (`count_child`).
_CHILD = """import sys
sys.path.insert(0, sys.argv[1])
import gateway
sys.path.insert(0, sys.argv[2])
import selection
selection.count_child(sys.argv[3], int(sys.argv[4]))
"""


def build(clock: Callable[[], float] = time.monotonic) -> tuple[Router, MemoryStore]:
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
    router = Router(catalogue, store, clock=clock)
    for endpoint in catalogue.endpoints():
        for _ in range(5):
            sample = AttemptSample(endpoint.key, time.time(), Outcome.OK, 200, 0.3, 0.3,
                                   random.uniform(50, 1000), 1.0, in_flight_at_start=random.randint(0, 8))
            store.record(sample)
            router.observe(sample)
    return router, store


def cases() -> dict[str, dict[str, Any]]:
    """The preference mixes, by name: what each adds to a one-message request for model `m`."""
    return {
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


def timed() -> None:
    random.seed(0)
    router, _ = build()
    resolver = Resolver(PolicySet.builtin())
    holder = next(e.key for e in router.catalogue.endpoints() if e.tier.value == "standard")
    router.sessions.remember("agent-1", holder, 29_000)
    print(f"{'preferences':<28}{'p50 µs':>9}{'mean µs':>9}  (resolve + plan, {N_ENDPOINTS} endpoints)")
    for name, extra in cases().items():
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


def count_child(lib_path: str, plans: int) -> None:
    """Under valgrind (`_CHILD`): each mix's `plans` requests collected and dumped under its name."""
    lib = ctypes.CDLL(lib_path)
    lib.dump.argtypes = [ctypes.c_char_p]
    random.seed(0)
    now = time.monotonic()
    router, _ = build(lambda: now)
    resolver = Resolver(PolicySet.builtin())
    holder = next(e.key for e in router.catalogue.endpoints() if e.tier.value == "standard")
    for name, extra in cases().items():
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}
        request = parse_chat_request(orjson.dumps(body), {}, "r", GatewayFile())
        for _ in range(20):  # the ranking built, the caches warm
            router.sessions.remember("agent-1", holder, 29_000)
            router.plan(request, resolver(request, {}))
        lib.toggle()
        for _ in range(plans):
            router.plan(request, resolver(request, {}))
        lib.toggle()
        lib.dump(name.encode())


def counted(checkouts: list[Path], plans: int) -> None:
    from first_write import build_lib, stretches  # its valgrind library (and gcc)

    from tests.harness import ensure_binary
    ensure_binary("valgrind", "valgrind")
    work = Path(tempfile.mkdtemp(prefix="selection-"))
    try:
        lib = build_lib(work)
        (work / "child.py").write_text(_CHILD)
        # valgrind cannot follow pymalloc's arenas; string hashes the same every run (dicts' probes)
        env = {**os.environ, "PYTHONMALLOC": "malloc", "PYTHONHASHSEED": "0"}
        results = {}
        for checkout in checkouts:
            out = work / f"{len(results)}" / "callgrind.out"
            out.parent.mkdir()
            subprocess.run(["valgrind", "--tool=callgrind", "--collect-atstart=no", f"--callgrind-out-file={out}.%p",
                            sys.executable, str(work / "child.py"), str(checkout.resolve()), str(HERE), str(lib),
                            str(plans)], env=env, check=True, capture_output=True)
            results[str(checkout)] = stretches(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    names = list(results)
    print(f"{'preferences':<28}" + "".join(f"{n[-24:]:>26}" for n in names) + "  (instructions per request)")
    for mix in cases():
        print(f"{mix:<28}" + "".join(f"{results[n][mix][0] / plans:>26,.0f}" for n in names))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instructions", nargs="*", type=Path, metavar="CHECKOUT",
                        help="count instructions per request under valgrind instead (default checkout: this one)")
    parser.add_argument("--plans", type=int, default=500, help="requests counted per mix (--instructions)")
    args = parser.parse_args()
    if args.instructions is None:
        timed()
    else:
        counted(args.instructions or [HERE.parent], args.plans)


if __name__ == "__main__":
    main()
