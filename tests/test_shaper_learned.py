"""Rate limits learned from providers' headers: read in one place (limit_headers.py), then paced by
the request shaper for a provider the catalogue gives no `rate_limits`, and any provider's stock held
within what it says remains until the reset."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

from gateway.shaper import Shaper
from gateway.simulator.rate_card import RateCard
from gateway.upstreams.limit_headers import Quota, Reported, read
from tests.routing.helpers import catalogue, endpoint


def _endpoint(tmp_path: Path, limits: dict[str, float] | None = None):  # type: ignore[no-untyped-def]
    fields = {"p": {"rate_limits": limits}} if limits else None
    cat = catalogue(tmp_path, [endpoint("p")], provider_fields=fields)
    return cat.models["m"][0]


async def _admitted(shaper: Shaper, ep, n: int, tokens: int = 10) -> int:  # type: ignore[no-untyped-def]
    return sum(await asyncio.gather(*(shaper.acquire(ep, tokens, "normal", 0.0) for _ in range(n))))


def _stamp(in_s: float) -> str:
    return datetime.fromtimestamp(time.time() + in_s, UTC).isoformat().replace("+00:00", "Z")


def test_anthropic_and_openai_headers_read_alike() -> None:
    anthropic = httpx.Headers({
        "anthropic-ratelimit-requests-limit": "50", "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": _stamp(1.2),
        "anthropic-ratelimit-input-tokens-limit": "30000", "anthropic-ratelimit-input-tokens-remaining": "29000",
        "anthropic-ratelimit-input-tokens-reset": _stamp(2),
        "anthropic-ratelimit-output-tokens-limit": "8000", "anthropic-ratelimit-output-tokens-remaining": "0",
        "anthropic-ratelimit-output-tokens-reset": _stamp(5)})
    got = read(anthropic, anthropic=True)
    assert got is not None and got.requests is not None and got.tokens is not None
    assert (got.requests.limit, got.requests.remaining) == (50, 49) and 0.5 < (got.requests.reset_s or 0) <= 1.2
    assert (got.tokens.limit, got.tokens.remaining) == (30000, 29000)  # no `tokens`: input tokens are paced
    assert 4 < (got.exhausted_s() or 0) <= 5  # output tokens are used up until their reset
    openai = httpx.Headers({"x-ratelimit-limit-requests": "500", "x-ratelimit-remaining-requests": "499",
                            "x-ratelimit-reset-requests": "120ms", "x-ratelimit-limit-tokens": "30000",
                            "x-ratelimit-remaining-tokens": "29000", "x-ratelimit-reset-tokens": "6m0s"})
    got = read(openai)
    assert got is not None and got.requests == Quota(500, 499, 0.12) and got.tokens == Quota(30000, 29000, 360.0)
    assert got.exhausted_s() is None
    assert read(openai, anthropic=True) == got  # Anthropic-compatible hosts may send OpenAI's
    assert read(httpx.Headers({"content-type": "text/event-stream"}), anthropic=True) is None
    assert read(anthropic) is None  # an OpenAI API provider's answers are not searched for Anthropic's


def test_a_provider_without_rate_limits_gets_a_bucket_of_the_limits_it_states(tmp_path: Path) -> None:
    ep = _endpoint(tmp_path)

    async def run() -> tuple[bool, int, dict | None]:  # type: ignore[type-arg]
        shaper = Shaper([ep.provider])
        assert not shaper.limits(ep) and shaper.view("p") is None
        # 60 a minute: a full bucket would admit ~60 now; the provider says 3 are left for 30 s.
        shaper.learn(ep.provider, Reported((("requests", Quota(60, 3, 30.0)),)))
        return shaper.limits(ep), await _admitted(shaper, ep, 10), shaper.view("p")

    limited, admitted, view = asyncio.run(run())
    assert limited and admitted == 3
    assert view == {"source": "learned", "requests_per_minute": 60, "tokens_per_minute": None,
                    "requests_left": 0, "tokens_left": None}


def test_the_catalogue_limits_win_and_the_remaining_still_holds_the_stock(tmp_path: Path) -> None:
    ep = _endpoint(tmp_path, {"requests_per_minute": 600, "burst_s": 1})  # a burst of 8 (test_shaper.py)

    async def run() -> tuple[int, dict | None]:  # type: ignore[type-arg]
        shaper = Shaper([ep.provider])
        shaper.learn(ep.provider, Reported((("requests", Quota(5, 2, 30.0)), ("tokens", Quota(1000, 900, 30.0)))))
        return await _admitted(shaper, ep, 10), shaper.view("p")

    admitted, view = asyncio.run(run())
    assert admitted == 2
    assert view is not None and view["source"] == "catalogue" and view["requests_per_minute"] == 600
    assert view["tokens_per_minute"] is None and view["tokens_left"] == 900 - 2 * 10


def test_a_higher_remaining_reported_late_does_not_raise_the_cap_before_the_reset(tmp_path: Path) -> None:
    ep = _endpoint(tmp_path)

    async def run() -> tuple[int, int, int]:
        shaper = Shaper([ep.provider])
        shaper.learn(ep.provider, Reported((("requests", Quota(600, 1, 0.3)),)))
        first = await _admitted(shaper, ep, 5)
        # An answer admitted earlier says 4 were left: stale, the cap stays until its reset.
        shaper.learn(ep.provider, Reported((("requests", Quota(600, 4, 0.3)),)))
        stale = await _admitted(shaper, ep, 5)
        await asyncio.sleep(0.4)  # reset: the bucket refills at its learned rate again
        return first, stale, await _admitted(shaper, ep, 5)

    first, stale, after_reset = asyncio.run(run())
    assert (first, stale) == (1, 0) and after_reset >= 3


def test_the_simulator_states_its_rate_card_in_each_apis_headers() -> None:
    card = RateCard(requests_per_minute=3, tokens_per_minute=1000)
    assert card.take(400) is None and card.take(400) is None
    assert card.take(400) == "tokens"  # 800 of 1000 used: refused, nothing taken
    messages = dict(card.headers("messages"))
    assert messages["anthropic-ratelimit-requests-limit"] == "3"
    assert messages["anthropic-ratelimit-requests-remaining"] == "1"
    assert messages["anthropic-ratelimit-tokens-limit"] == "1000"
    assert messages["anthropic-ratelimit-tokens-remaining"] == "200"
    reported = read(httpx.Headers(card.headers("messages")), anthropic=True)
    assert reported is not None and reported.tokens is not None and 40 < (reported.tokens.reset_s or 0) <= 48
    chat = read(httpx.Headers(card.headers("chat")))
    assert chat is not None and chat.requests == Quota(3, 1, chat.requests.reset_s)  # type: ignore[union-attr]
    assert chat.tokens is not None and chat.tokens.remaining == 200 and 40 <= (chat.tokens.reset_s or 0) <= 48
