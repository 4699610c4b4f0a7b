"""The routing race: N users for T seconds, per scenario, three routers, scored against an oracle.

Run by hand: `.venv/bin/python benchmarks/routing_race.py [--scenario all] [--seed 1] [--users 24]
[--seconds 25]`. Loopback only; bounded (about 3 x (T + a few s) per scenario).

Each scenario (race_scenarios.py) is a simulator with endpoints of one model. Closed loop: every user
sends a streamed request (max_tokens fixed), reads it to the end, sends the next, until T. Routers:

- oracle: a small router in this script. It knows every endpoint's
  true profile (and the run-time changes) and the true load (it is the only client), and sends each
  request where it will be fastest at that moment: least TTFT + n / rate(load + 1), scaled by
  1 / (1 - error rate), never over capacity; a failed request is retried at the next best.
- random: picks an allowed endpoint uniformly, no retry.

Both send their choice through a gateway process of their own with `provider.only: [choice]`, so all
three routers pay the same proxy hop (on a busy shared machine that hop costs far more than the
~1 ms it costs on an idle one); `--direct` sends them to the simulator directly instead.
- ultraroute: through a real gateway process, `provider.sort: throughput` (+ `speed: ultrafast` where
  the scenario has an ultrafast tier). It learns only from what it sees: started after the other two
  have run, with `health.warm_up: true` (one short completion to each endpoint before it is ready;
  gateway/health/warm_up.py), then from the race's own requests.

Prints per router: aggregate output tok/s and its share of the oracle's, per-user decode p25/p50,
TTFT and end-to-end p50/p95, success rate, and the share of requests per endpoint.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.race_scenarios import Racer, Scenario, allowed, scenarios
from gateway.simulator.testing import SimProcess, make_sim_config
from tests import harness
from tests.harness import GatewayProcess, catalogue_for

_wait_ready = harness.wait_ready


def _patient(proc: Any, url: str, timeout_s: float, *args: Any, **kwargs: Any) -> None:
    """A busy shared machine can take more than the tests' 20 s to start a gateway."""
    _wait_ready(proc, url, max(timeout_s, 120.0), *args, **kwargs)


harness.wait_ready = _patient

MAX_TOKENS = 200
_USAGE = re.compile(rb'"completion_tokens":\s*(\d+)')


@dataclass
class Result:
    ok: bool
    endpoint: str
    tokens: int = 0
    ttft_s: float = 0.0
    e2e_s: float = 0.0
    decode_tps: float = 0.0


@dataclass
class Run:
    results: list[Result] = field(default_factory=list)
    elapsed_s: float = 0.0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


@dataclass
class Timed:
    """One streamed completion as the client saw it (perf_counter times)."""

    endpoint: str  # the one that answered (the gateway's header), else the one asked
    start: float
    first: float  # the first content chunk; 0.0: none came
    end: float
    tail: bytes | None  # the stream's last bytes; None: no 200 answer, or the connection failed


async def timed_stream(client: httpx.AsyncClient, url: str, body: dict[str, Any], endpoint: str,
                       keep: int = 2048) -> Timed:
    """Stream one completion, keeping its last `keep` bytes (where the usage chunk is)."""
    start = time.perf_counter()
    first = 0.0
    tail = b""
    try:
        async with client.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                await r.aread()
                return Timed(endpoint, start, 0.0, time.perf_counter(), None)
            endpoint = r.headers.get("x-ultraroute-endpoint", endpoint)
            async for chunk in r.aiter_raw():
                if not first and b'"content"' in chunk:
                    first = time.perf_counter()
                tail = (tail + chunk)[-keep:]
    except httpx.HTTPError:
        return Timed(endpoint, start, 0.0, time.perf_counter(), None)
    return Timed(endpoint, start, first, time.perf_counter(), tail)


async def stream_one(client: httpx.AsyncClient, url: str, body: dict[str, Any], endpoint: str) -> Result:
    t = await timed_stream(client, url, body, endpoint)
    if t.tail is None:
        return Result(False, t.endpoint, e2e_s=t.end - t.start)
    m = _USAGE.search(t.tail)
    tokens = int(m.group(1)) if m else 0
    ok = tokens == MAX_TOKENS and b"[DONE]" in t.tail
    decode = (tokens - 1) / (t.end - t.first) if t.first and t.end > t.first else 0.0
    return Result(ok, t.endpoint, tokens, (t.first or t.end) - t.start, t.end - t.start, decode)


class DirectRouter:
    """Oracle or random: picks a simulated endpoint itself and calls it directly."""

    def __init__(self, racers: tuple[Racer, ...], sim: SimProcess, oracle: bool, rng: random.Random,
                 proxy: str | None = None) -> None:
        self.racers = racers
        self.sim = sim
        self.proxy = proxy  # a gateway's chat URL: the choice goes through it (`provider.only`)
        self.oracle = oracle
        self.rng = rng
        self.profiles = {r.name: dict(r.profile) for r in racers}  # the truth, kept current by events
        self.load = Counter[str]()

    def expected_s(self, name: str, exclude: set[str]) -> float:
        p = self.profiles[name]
        load = self.load[name]
        if name in exclude or load >= p["capacity"]:
            return float("inf")
        rate = p["tokens_per_second"] / (1 + p["slowdown_per_user"] * load)  # simulator's rate_at(load + 1)
        error = p.get("faults", {}).get("error_rate", 0.0)
        return (p["ttft_ms"] / 1000 + MAX_TOKENS / rate) / (1 - error)

    async def request(self, client: httpx.AsyncClient, body: dict[str, Any]) -> Result:
        tried: set[str] = set()
        while True:
            if self.oracle:
                name = min(self.profiles, key=lambda n: self.expected_s(n, tried))
            else:
                name = self.rng.choice(list(self.profiles))
            self.load[name] += 1
            try:
                if self.proxy is None:
                    result = await stream_one(client, self.sim.base_url(name) + "/chat/completions",
                                              {**body, "model": "sim"}, name)
                else:
                    result = await stream_one(client, self.proxy, {**body, "model": "m", "speed": "ultrafast",
                                                                   "provider": {"only": [name]}}, name)
            finally:
                self.load[name] -= 1
            tried.add(name)
            if result.ok or not self.oracle or len(tried) == len(self.profiles):
                return result


async def race(send: Callable[[httpx.AsyncClient, dict[str, Any]], Any], users: int, seconds: float,
               events: list[tuple[float, Callable[[], None]]]) -> Run:
    body = {"messages": [{"role": "user", "content": "Tell me a story."}], "max_tokens": MAX_TOKENS,
            "stream": True, "stream_options": {"include_usage": True}}
    run = Run()
    start = time.perf_counter()
    stop = start + seconds
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=users * 4)) as client:
        async def user() -> None:
            while time.perf_counter() < stop:
                run.results.append(await send(client, body))

        async def timeline() -> None:
            for at, apply in events:
                await asyncio.sleep(max(0.0, start + at - time.perf_counter()))
                await asyncio.to_thread(apply)

        await asyncio.gather(timeline(), *(user() for _ in range(users)))
    run.elapsed_s = time.perf_counter() - start
    return run


def run_scenario(s: Scenario, seed: int, users: int, seconds: float, direct: bool,
                 logs: Path | None = None) -> dict[str, Run]:
    racers = allowed(s)
    config = make_sim_config({r.name: r.profile for r in racers}, seed=seed)
    runs: dict[str, Run] = {}
    with SimProcess(config) as sim:
        rows = [{"sim": r.name, "id": r.name, "tier": r.tier,
                 "advertised": {"tokens_per_second": r.advertised_tps, "ttft_ms": r.advertised_ttft_ms}}
                for r in racers]
        catalogue = catalogue_for(sim, {"m": rows})
        # Oracle and random send their choices through a gateway of their own (unless --direct), so
        # that all three pay the same proxy hop.
        base = None if direct else GatewayProcess(catalogue, log_level="warning").start()
        gw: GatewayProcess | None = None
        try:

            def events(router: DirectRouter | None) -> list[tuple[float, Callable[[], None]]]:
                out = []
                for at, name, patch in s.events:
                    def apply(name: str = name, patch: dict[str, Any] = patch) -> None:
                        sim.patch(name, **patch)
                        if router is not None:
                            router.profiles[name].update(patch)
                    out.append((at * seconds, apply))
                return out

            for kind in ("oracle", "random"):
                sim.reset(profiles=True)
                router = DirectRouter(racers, sim, kind == "oracle", random.Random(seed),
                                      None if base is None else base.base_url + "/chat/completions")
                runs[kind] = asyncio.run(race(router.request, users, seconds, events(router)))
            sim.reset(profiles=True)
            # Ultraroute's starts fresh, having learnt nothing, and measures each endpoint once before
            # it says it is ready (`health.warm_up`, as a deployment without shared history would run).
            gw = GatewayProcess({**catalogue, "health": {"warm_up": True}}, log_level="warning").start()
            url = gw.base_url + "/chat/completions"
            extra: dict[str, Any] = {"model": "m", "provider": {"sort": "throughput"}}
            if s.speed:
                extra["speed"] = s.speed

            async def via_gateway(client: httpx.AsyncClient, body: dict[str, Any]) -> Result:
                return await stream_one(client, url, {**body, **extra}, "?")

            runs["ultraroute"] = asyncio.run(race(via_gateway, users, seconds, events(None)))
        finally:
            if gw is not None:
                gw.stop()
            if base is not None:
                base.stop()
            if logs is not None and gw is not None:  # Ultraroute's log: one access-log line per request
                logs.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(gw.log_path, logs / f"{s.name}-seed{seed}.log")
    return runs


def report(s: Scenario, seed: int, runs: dict[str, Run]) -> dict[str, float]:
    names = [r.name for r in allowed(s)]
    print(f"\n== {s.name} (seed {seed}): {s.about}")
    head = f"{'router':<11}{'tok/s':>7}{'share':>7}{'dec p25':>8}{'dec p50':>8}{'ttft p50':>9}{'ttft p95':>9}" \
           f"{'e2e p50':>8}{'e2e p95':>8}{'success':>9}  requests per endpoint"
    print(head)
    oracle_tps = sum(r.tokens for r in runs["oracle"].results if r.ok) / runs["oracle"].elapsed_s
    oracle_p95 = pct([r.e2e_s for r in runs["oracle"].results if r.ok], 0.95)
    scores: dict[str, float] = {}
    for kind, run in runs.items():
        ok = [r for r in run.results if r.ok]
        tps = sum(r.tokens for r in ok) / run.elapsed_s
        share = Counter(r.endpoint for r in run.results)
        total = max(1, len(run.results))
        shares = " ".join(f"{n}:{share[n] / total:.0%}" for n in names)
        dec = [r.decode_tps for r in ok]
        e2e = [r.e2e_s for r in ok]
        ttft = [r.ttft_s for r in ok]
        success = len(ok) / total
        print(f"{kind:<11}{tps:>7.0f}{tps / oracle_tps:>7.2f}{pct(dec, .25):>8.0f}{pct(dec, .5):>8.0f}"
              f"{pct(ttft, .5):>9.2f}{pct(ttft, .95):>9.2f}{pct(e2e, .5):>8.2f}{pct(e2e, .95):>8.2f}"
              f"{success:>9.2%}  {shares}")
        if kind == "ultraroute":
            scores = {"share": tps / oracle_tps, "p95_ratio": pct(e2e, .95) / oracle_p95, "success": success}
    verdict = scores["share"] >= 0.85 and scores["p95_ratio"] <= 1.3 and scores["success"] >= 0.999
    print(f"ultraroute: {scores['share']:.2f} of oracle tok/s, e2e p95 {scores['p95_ratio']:.2f}x oracle, "
          f"success {scores['success']:.2%} -> {'PASS' if verdict else 'MISS'}")
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="all", help="capacity | false-advert | degrade | flaky | mix | all")
    parser.add_argument("--seed", type=int, nargs="+", default=[1])
    parser.add_argument("--users", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--direct", action="store_true",
                        help="oracle and random call the simulator directly (no proxy hop: fair on an idle machine)")
    parser.add_argument("--logs", type=Path, help="keep Ultraroute's gateway log of each run in this directory")
    args = parser.parse_args()
    summary = []
    for seed in args.seed:
        known = scenarios(seed)
        chosen = list(known) if args.scenario == "all" else [args.scenario]
        for name in chosen:
            s = known[name]
            scores = report(s, seed, run_scenario(s, seed, args.users, args.seconds, args.direct, args.logs))
            summary.append((name, seed, scores))
    print(f"\n{'scenario':<14}{'seed':>5}{'share':>7}{'p95 x':>7}{'success':>9}")
    for name, seed, sc in summary:
        print(f"{name:<14}{seed:>5}{sc['share']:>7.2f}{sc['p95_ratio']:>7.2f}{sc['success']:>9.2%}")


if __name__ == "__main__":
    main()
