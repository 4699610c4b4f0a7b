"""The agent race: concurrent agent sessions whose context grows every turn, five routers, scored
against an oracle.

Run by hand: `.venv/bin/python benchmarks/agent_race.py [--seed 1 2 3] [--sessions 10] [--turns 8]`.
Loopback only; about a minute per router and seed at the defaults.

Endpoints (agent_scenarios.py): GPU hosts with prompt caches, a wafer-scale-like host that prefills
fast but caches nothing, and a capacity-limited ultrafast tier; advertised figures are not the truth.
Each session sends a shared ~3k-token system prompt and its own task, then per turn a streamed request
(`max_tokens` fixed), a pause for its tool to run, and the tool's result (500-1,500 tokens) appended
with the answer: its context grows to ~10-15k tokens over the turns, ~90% of each request repeating the
last. Sessions, their contents and their pauses are the same for every router (seeded).

Routers (each through a gateway process, so that all pay the same proxy hop; the first three pick with
`provider.only`):
- oracle: knows every host's true profile, its load (it is the only client) and which prefix each
  host's cache holds for each session; sends each turn where its TTFT + decode now plus the best next
  turn's (given the cache this choice builds) is least, never over capacity; retries a failed turn at
  the next best.
- random, round-robin: uniform / in turn, no retry.
- ultraroute (default): a fresh gateway (`health.warm_up`), no options: it names the session by its
  prefix and weighs staying on the cache holder against moving.
- ultraroute (sort e2e): the same with `provider.sort: e2e`.

Per router: mean session model time (the sum of its turns' request times: TTFT + decode, tool time
excluded), turn p95, total cost (usage x true prices), cache hit ratio (cached / prompt tokens) and
success. Done when default and e2e are within 1.15x of the oracle's model time and 1.10x of its cost
with success >= 99.9%.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import re
import statistics
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.agent_scenarios import Host, hosts
from benchmarks.routing_race import pct, timed_stream  # also makes the harness patient with slow starts
from gateway.simulator.content import PrefixCache
from gateway.simulator.testing import SimProcess, make_sim_config
from tests.harness import GatewayProcess, catalogue_for

MAX_TOKENS = 120
NEXT_TURN_TOKENS = 1_000  # about what a turn adds (a tool result and an answer): the oracle's look-ahead
SYSTEM = {"role": "system", "content": "You are a coding agent with these tools. " + "tool spec line. " * 750}
_INT = {name: re.compile(rb'"' + name.encode() + rb'":\s*(\d+)')
        for name in ("prompt_tokens", "cached_tokens", "completion_tokens")}


@dataclass
class Turn:
    ok: bool
    endpoint: str
    e2e_s: float
    ttft_s: float = 0.0
    prompt: int = 0
    cached: int = 0
    output: int = 0


@dataclass
class Result:
    sessions: list[list[Turn]] = field(default_factory=list)


def script(seed: int, i: int, turns: int) -> tuple[float, list[tuple[str, float]]]:
    """A session's start offset and, per turn, its tool result text and the pause before it."""
    rng = random.Random(f"{seed}/{i}")
    steps = [(f"tool result {t}: " + "output line. " * rng.randint(150, 460), rng.uniform(0.2, 0.8))
             for t in range(turns)]
    return rng.uniform(0.0, 2.0), steps


async def stream_turn(client: httpx.AsyncClient, url: str, body: dict[str, Any], endpoint: str) -> Turn:
    t = await timed_stream(client, url, body, endpoint, keep=4096)
    if t.tail is None:
        return Turn(False, t.endpoint, t.end - t.start)
    got = {k: int(m.group(1)) if (m := rx.search(t.tail)) else 0 for k, rx in _INT.items()}
    ok = got["completion_tokens"] == MAX_TOKENS and b"[DONE]" in t.tail
    return Turn(ok, t.endpoint, t.end - t.start, (t.first or t.end) - t.start, got["prompt_tokens"],
                got["cached_tokens"], got["completion_tokens"])


class Picker:
    """Oracle, random or round-robin: chooses a host itself, sent through a gateway with `provider.only`."""

    def __init__(self, kind: str, truth: tuple[Host, ...], url: str, seed: int) -> None:
        self.kind = kind
        self.hosts = {h.name: h for h in truth}
        self.url = url
        self.rng = random.Random(seed)
        self.cycle = itertools.cycle(sorted(self.hosts))
        self.load = Counter[str]()
        self.held: dict[tuple[str, str], int] = {}  # (session, host) -> prompt tokens its cache holds

    def expected_s(self, name: str, session: str, prompt: int, tried: set[str], held: int | None = None) -> float:
        """True TTFT + decode of a turn of `prompt` tokens on `name` now (`held`: what its cache holds
        of the session, if not what it holds now)."""
        h = self.hosts[name]
        p = h.profile
        load = self.load[name]
        if name in tried or load >= p["capacity"]:
            return float("inf")
        held = self.held.get((session, name), 0) if held is None else held
        cached = min(held, prompt) if h.cache else 0
        slow = 1.0 + p["slowdown_per_user"] * load  # the simulator's factor at load + 1 in flight
        prefill = ((prompt - cached) / p["prefill_tokens_per_second"]
                   + cached / p["cached_prefill_tokens_per_second"]) * slow
        rate = p["tokens_per_second"] / (slow * (1 + p["decode_slowdown_per_1k_context"] * prompt / 1000))
        return p["ttft_ms"] / 1000 + prefill + MAX_TOKENS / rate

    def lookahead_s(self, name: str, session: str, prompt: int, tried: set[str]) -> float:
        """This turn on `name`, plus the best next turn given that `name` then holds this prompt: an
        oracle that knows the caches values the cache a choice builds, not only this turn's time."""
        now = self.expected_s(name, session, prompt, tried)
        following = prompt + NEXT_TURN_TOKENS
        best_next = min(self.expected_s(n, session, following, set(), prompt if n == name else None)
                        for n in self.hosts)
        return now + best_next

    async def send(self, client: httpx.AsyncClient, session: str, messages: list[dict[str, Any]],
                   body: dict[str, Any]) -> Turn:
        prompt = PrefixCache.prefixes(messages)[-1][1] if self.kind == "oracle" else 0
        tried: set[str] = set()
        while True:
            if self.kind == "oracle":
                name = min(self.hosts, key=lambda n: self.lookahead_s(n, session, prompt, tried))
            elif self.kind == "random":
                name = self.rng.choice(sorted(self.hosts))
            else:
                name = next(self.cycle)
            self.load[name] += 1
            try:
                turn = await stream_turn(client, self.url, {**body, "model": "m", "provider": {"only": [name]}}, name)
            finally:
                self.load[name] -= 1
            tried.add(name)
            if turn.ok:
                self.held[(session, name)] = turn.prompt
            if turn.ok or self.kind != "oracle" or len(tried) == len(self.hosts):
                return turn


async def run_sessions(send: Any, seed: int, n_sessions: int, turns: int) -> Result:
    result = Result([[] for _ in range(n_sessions)])
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=n_sessions * 2)) as client:
        async def session(i: int) -> None:
            start, steps = script(seed, i, turns)
            await asyncio.sleep(start)
            messages: list[dict[str, Any]] = [SYSTEM, {"role": "user", "content": f"Task {seed}-{i}: fix issue {i}."}]
            for text, pause in steps:
                body = {"messages": messages, "max_tokens": MAX_TOKENS, "stream": True,
                        "stream_options": {"include_usage": True}}
                result.sessions[i].append(await send(client, f"s{i}", messages, body))
                messages = [*messages, {"role": "assistant", "content": f"calling a tool (step {len(messages)})"},
                            {"role": "user", "content": text}]
                await asyncio.sleep(pause)  # the tool runs: not model time

        await asyncio.gather(*(session(i) for i in range(n_sessions)))
    return result


def run_seed(seed: int, n_sessions: int, turns: int) -> dict[str, tuple[Result, dict[str, Host]]]:
    truth = hosts(seed)
    config = make_sim_config({h.name: h.profile for h in truth}, seed=seed)
    runs: dict[str, tuple[Result, dict[str, Host]]] = {}
    by_name = {h.name: h for h in truth}
    with SimProcess(config) as sim:
        rows = [{"sim": h.name, "id": h.name, "price": h.price, "advertised": h.advertised} for h in truth]
        catalogue = catalogue_for(sim, {"m": rows})
        with GatewayProcess(catalogue, log_level="warning") as proxy:
            for kind in ("oracle", "random", "round-robin"):
                sim.reset(profiles=True)  # empty caches, counters
                picker = Picker(kind, truth, proxy.base_url + "/chat/completions", seed)
                runs[kind] = (asyncio.run(run_sessions(picker.send, seed, n_sessions, turns)), by_name)
        for kind, provider in (("ultraroute", None), ("ultraroute e2e", {"sort": "e2e"})):
            sim.reset(profiles=True)
            with GatewayProcess({**catalogue, "health": {"warm_up": True}}, log_level="warning") as gw:
                url = gw.base_url + "/chat/completions"
                extra: dict[str, Any] = {"model": "m"} | ({"provider": provider} if provider else {})

                async def via(client: httpx.AsyncClient, _s: str, _m: list[dict[str, Any]],
                              body: dict[str, Any], url: str = url, extra: dict[str, Any] = extra) -> Turn:
                    return await stream_turn(client, url, {**body, **extra}, "?")

                runs[kind] = (asyncio.run(run_sessions(via, seed, n_sessions, turns)), by_name)
    return runs


def cost(turn: Turn, host: Host | None) -> float:
    if host is None or not turn.ok:
        return 0.0
    price = host.price
    cached_price = price.get("cached_input", price["input"])
    return ((turn.prompt - turn.cached) * price["input"] + turn.cached * cached_price
            + turn.output * price["output"]) / 1e6


def score(result: Result, by_name: dict[str, Host]) -> dict[str, float]:
    turns = [t for s in result.sessions for t in s]
    ok = [t for t in turns if t.ok]
    prompt = sum(t.prompt for t in ok)
    return {
        "model_s": statistics.mean(sum(t.e2e_s for t in s) for s in result.sessions),
        "p95_s": pct([t.e2e_s for t in turns], 0.95),
        "cost": sum(cost(t, by_name.get(t.endpoint)) for t in turns),
        "hit": sum(t.cached for t in ok) / prompt if prompt else 0.0,
        "success": len(ok) / max(1, len(turns)),
        "shares": Counter(t.endpoint for t in turns),  # type: ignore[dict-item]
        "turns": len(turns),
    }


def report(seed: int, runs: dict[str, tuple[Result, dict[str, Host]]]) -> dict[str, dict[str, float]]:
    scores = {kind: score(result, by_name) for kind, (result, by_name) in runs.items()}
    oracle = scores["oracle"]
    print(f"\n== agent race, seed {seed}")
    print(f"{'router':<16}{'model s':>8}{'x orc':>7}{'turn p95':>9}{'cost $':>9}{'x orc':>7}{'cache':>7}"
          f"{'success':>9}  turns per host")
    for kind, sc in scores.items():
        total = max(1, sc["turns"])
        shares = " ".join(f"{n}:{c / total:.0%}" for n, c in sorted(sc["shares"].items()))  # type: ignore[attr-defined]
        print(f"{kind:<16}{sc['model_s']:>8.1f}{sc['model_s'] / oracle['model_s']:>7.2f}{sc['p95_s']:>9.2f}"
              f"{sc['cost']:>9.4f}{sc['cost'] / oracle['cost']:>7.2f}{sc['hit']:>7.0%}{sc['success']:>9.2%}  {shares}")
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--turns", type=int, default=8)
    args = parser.parse_args()
    summary = []
    for seed in args.seed:
        scores = report(seed, run_seed(seed, args.sessions, args.turns))
        summary.append((seed, scores))
    print(f"\n{'seed':<6}{'router':<16}{'time x':>8}{'cost x':>8}{'success':>9}  verdict")
    for seed, scores in summary:
        oracle = scores["oracle"]
        for kind in ("ultraroute", "ultraroute e2e", "random", "round-robin"):
            sc = scores[kind]
            t, c = sc["model_s"] / oracle["model_s"], sc["cost"] / oracle["cost"]
            verdict = "PASS" if t <= 1.15 and c <= 1.10 and sc["success"] >= 0.999 else "MISS"
            print(f"{seed:<6}{kind:<16}{t:>8.2f}{c:>8.2f}{sc['success']:>9.2%}  {verdict if 'ultra' in kind else ''}")


if __name__ == "__main__":
    main()
