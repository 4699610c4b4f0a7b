"""The routing race's scenarios: simulated endpoints of one model, their catalogue entries, run-time events.

Each endpoint has a *true* simulator profile (what it really does, read only by the oracle) and a
catalogue entry (tier, advertised figures: what the gateway is told, possibly false). Events patch
a profile at a fraction of the run (a tier that degrades and recovers). Curves differ per endpoint
and per seed (each figure is scaled by a seeded factor within +-15%), so no scenario is tuned to one
curve.

Advertised figures are a vendor's claim, never the truth read off the profile: about half the
endpoints claim 20-60% more speed (and that much less TTFT) than they deliver, the others round
their figures up by up to 10% (`_claim`). The claims come from their own seeded generator, so a seed
gives the same true profiles whatever the claims, and the same claims on every run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

TICK_MS = 40.0  # batches of tokens per socket write: keeps the race's CPU modest on a shared machine


@dataclass(frozen=True)
class Racer:
    name: str
    tier: str
    profile: dict[str, Any]  # simulator profile: the truth
    advertised_tps: float  # what the catalogue claims
    advertised_ttft_ms: float


@dataclass(frozen=True)
class Scenario:
    name: str
    about: str
    racers: tuple[Racer, ...]
    speed: str | None  # the `speed` the gateway is asked for (ultrafast where there is one)
    events: tuple[tuple[float, str, dict[str, Any]], ...] = field(default=())  # (fraction of T, name, patch)


def _claim(claims: random.Random) -> float:
    """How much better than the truth a vendor says its endpoint is: optimistic (+20-60%) for about
    half of them, the rest within 10%."""
    optimistic = claims.random() < 0.5
    return claims.uniform(1.2, 1.6) if optimistic else claims.uniform(1.0, 1.1)


def _racer(rng: random.Random, claims: random.Random, name: str, tier: str, tps: float, slowdown: float,
           ttft_ms: float, capacity: int = 256, advertised_tps: float | None = None, **extra: Any) -> Racer:
    def jitter(x: float) -> float:
        return x * rng.uniform(0.85, 1.15)

    tps, slowdown, ttft_ms = jitter(tps), jitter(slowdown), jitter(ttft_ms)
    profile = {"tokens_per_second": round(tps, 1), "slowdown_per_user": round(slowdown, 4),
               "ttft_ms": round(ttft_ms), "ttft_jitter": 0.15, "capacity": capacity, "tick_ms": TICK_MS,
               **extra}
    claim = _claim(claims)  # drawn for every racer, so one racer's claim does not shift the others'
    return Racer(name, tier, profile, advertised_tps or round(tps * claim), round(ttft_ms / claim))


def scenarios(seed: int) -> dict[str, Scenario]:
    rng = random.Random(seed)
    claims = random.Random(f"claims:{seed}")  # its own stream: the true profiles do not depend on it

    def premium() -> Racer:  # capacity-limited, and per-user speed falls steeply with concurrency
        return _racer(rng, claims, "ultra", "ultrafast", 700, 0.22, 150, capacity=6)

    def liar() -> Racer:  # advertises 500 tok/s, delivers 70
        return _racer(rng, claims, "liar", "fast", 70, 0.04, 300, advertised_tps=500)

    def fast(name: str) -> Racer:
        return _racer(rng, claims, name, "fast", 260, 0.05, 300)

    def std(name: str, tps: float = 110, **extra: Any) -> Racer:
        return _racer(rng, claims, name, "standard", tps, 0.02, 450, **extra)

    def flaky() -> Racer:  # the best standard tier, but one request in five fails with a 503
        return std("flaky", 190, faults={"error_rate": 0.2, "error_status": 503})

    degrade = ((1 / 3, "fast-b", {"tokens_per_second": None}), (2 / 3, "fast-b", {}))
    out = [
        Scenario("capacity", "capacity-limited ultrafast tier whose speed falls with concurrency",
                 (premium(), fast("fast-a"), std("std-a"), std("std-b")), "ultrafast"),
        Scenario("false-advert", "a fast tier whose advertised speed is false",
                 (liar(), fast("fast-a"), std("std-a"), std("std-b")), None),
        Scenario("degrade", "a fast tier that slows to a third at T/3 and recovers at 2T/3",
                 (fast("fast-a"), fast("fast-b"), std("std-a"), std("std-b")), None, degrade),
        Scenario("flaky", "a flaky standard tier (20% 503s)",
                 (fast("fast-a"), flaky(), std("std-b")), None),
        Scenario("mix", "all four at once",
                 (premium(), liar(), fast("fast-b"), flaky(), std("std-b")), "ultrafast", degrade),
    ]
    return {s.name: _resolve_events(s) for s in out}


def _resolve_events(s: Scenario) -> Scenario:
    """`tokens_per_second: None` means a third of the true speed; `{}` means back to the true profile."""
    events = []
    for at, name, patch in s.events:
        true = next(r for r in s.racers if r.name == name).profile
        if not patch:
            patch = {"tokens_per_second": true["tokens_per_second"]}
        elif patch.get("tokens_per_second", 0) is None:
            patch = {"tokens_per_second": round(true["tokens_per_second"] / 3, 1)}
        events.append((at, name, patch))
    return Scenario(s.name, s.about, s.racers, s.speed, tuple(events))


def allowed(s: Scenario) -> tuple[Racer, ...]:
    """The endpoints the gateway may use for this scenario's preferences (ultrafast only when asked)."""
    return tuple(r for r in s.racers if r.tier != "ultrafast" or s.speed == "ultrafast")
