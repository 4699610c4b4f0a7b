"""A small catalogue and a router over a MemoryStore, for routing unit tests."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import yaml

from gateway.config import Catalogue, Endpoint, load_catalogue
from gateway.context import ChatRequest, Preferences
from gateway.routing.router import Router, RouterSettings
from gateway.telemetry import MemoryStore
from gateway.telemetry.sample import AttemptSample, Outcome


def endpoint(provider: str, tier: str = "standard", **extra: Any) -> dict[str, Any]:
    return {"provider": provider, "model": f"up-{provider}", "tier": tier,
            "price": extra.pop("price", {"input": 1.0, "output": 2.0}), **extra}


def catalogue(tmp_path: Path, endpoints: list[dict[str, Any]], regions: dict[str, str] | None = None,
              model: str = "m", provider_fields: dict[str, dict[str, Any]] | None = None) -> Catalogue:
    providers = {e["provider"]: {"base_url": f"http://{e['provider']}.test/v1",
                                 "region": (regions or {}).get(e["provider"], "us"),
                                 **(provider_fields or {}).get(e["provider"], {})} for e in endpoints}
    path = tmp_path / "providers.yaml"
    path.write_text(yaml.safe_dump({"providers": providers, "models": {model: {"endpoints": endpoints}}}))
    return load_catalogue(path, env={})[0]


def one_endpoint(tmp_path: Path, **extra: Any) -> Endpoint:
    """The endpoint of a catalogue of one (provider "a"), with `extra` catalogue fields."""
    return catalogue(tmp_path, [endpoint("a", **extra)]).models["m"][0]


def chat(model: str = "m", **body: Any) -> ChatRequest:
    full = {"model": model, "messages": [{"role": "user", "content": "hello"}], **body}
    return ChatRequest(request_id="r", body=full, model=model, stream=False, include_usage=False,
                       prompt_chars=5, session_key=body.get("session_id"))


def router(cat: Catalogue, explore_rate: float = 0.0, seed: int = 1) -> tuple[Router, MemoryStore]:
    store = MemoryStore()
    settings = RouterSettings(explore_rate=explore_rate, cold_explore_rate=explore_rate, ranking_ttl_s=0.0)
    return Router(cat, store, settings, rng=random.Random(seed)), store


def feed(r: Router, store: MemoryStore, key: str, *, tps: float | None = None, ttft_ms: float = 500.0,
         n: int = 5, in_flight: int = 0, outcome: Outcome = Outcome.OK) -> None:
    for _ in range(n):
        # Started its e2e (1 s) ago, so it ends now, as a recorded attempt does: one that ended in the
        # future could fall in the bucket after now's, outside every window.
        sample = AttemptSample(endpoint_key=key, started_at=time.time() - 1.0, outcome=outcome, status=200,
                               ttft_s=ttft_ms / 1000, ttfat_s=ttft_ms / 1000, decode_tps=tps, e2e_s=1.0,
                               output_tokens=100, in_flight_at_start=in_flight)
        store.record(sample)
        r.observe(sample)


def first(r: Router, prefs: Preferences, request: ChatRequest | None = None) -> str:
    return r.plan(request or chat(), prefs).candidates[0].endpoint.id
