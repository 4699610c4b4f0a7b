"""End to end: a provider with no `rate_limits` in the catalogue, whose simulated rate card is 4
requests a minute, states it in every answer (Anthropic's `anthropic-ratelimit-*`, OpenAI's
`x-ratelimit-*`). After the first answer the gateway paces it: a burst of concurrent requests takes
what the provider said is left and spills the rest to the fallback model -- no 429 from the provider."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gateway.simulator.testing import SimProcess
from tests.harness import GatewayProcess
from tests.upstreams.conftest import chat, claude

HELLO = [{"role": "user", "content": "Say hello"}]


def ask(gw: GatewayProcess, model: str) -> tuple[str, str]:
    """One request in the model's client API: (the endpoint that served, x-ultraroute-fallback)."""
    fallback = {"models": ["o"]}  # open-flex, on another provider
    if model == "q":
        raw = claude(gw).messages.with_raw_response.create(model=model, max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
                                                           extra_body=fallback)
    else:
        raw = chat(gw).chat.completions.with_raw_response.create(model=model, max_tokens=4, messages=HELLO,  # type: ignore[arg-type]
                                                                 extra_body=fallback)
    raw.parse()
    return raw.headers["x-ultraroute-endpoint"], raw.headers.get("x-ultraroute-fallback", "")


@pytest.mark.parametrize(("model", "paced"), [("q", "claude-paced"), ("h", "open-paced")])
def test_limits_learned_from_headers_pace_the_provider_without_429s(gw: GatewayProcess, sim: SimProcess,
                                                                    model: str, paced: str) -> None:
    assert ask(gw, model) == (paced, "")  # the first answer says: 4 a minute, 3 left
    with ThreadPoolExecutor(8) as pool:
        served = list(pool.map(lambda _: ask(gw, model), range(8)))
    here = [s for s in served if s[0] == paced]
    spilled = [s for s in served if s[0] != paced]
    assert len(here) == 3 and len(spilled) == 5
    # Paced (rate_limit: no stock left; cooldown: an answer said none is left), never refused.
    assert all(f.endswith(("(rate_limit)", "(cooldown)")) for _, f in spilled), served
    stats = sim.stats(paced)
    assert stats["rate_limited"] == 0 and stats["requests"] == 4
    view = next(e for e in httpx.get(f"{gw.url}/v1/endpoints").json()["data"] if e["id"] == paced)
    assert view["rate_limits"]["source"] == "learned"
    assert view["rate_limits"]["requests_per_minute"] == 4 and view["rate_limits"]["tokens_per_minute"] == 100_000
    assert view["rate_limits"]["requests_left"] == 0
