"""Tests of gateway.simulator.prompt_cache: longest prefix, time to live, size bound, disabled."""

from __future__ import annotations

from gateway.simulator.content import PrefixCache
from gateway.simulator.prompt_cache import PromptCache, PromptCacheConfig

SYSTEM = {"role": "system", "content": "s" * 4000}
TURN1 = [SYSTEM, {"role": "user", "content": "a" * 400}]
TURN2 = [*TURN1, {"role": "assistant", "content": "b" * 40}, {"role": "user", "content": "c" * 400}]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_the_next_turn_hits_the_whole_previous_prompt() -> None:
    cache = PromptCache()
    first = PrefixCache.prefixes(TURN1)
    assert cache.lookup(first) == 0
    cache.insert(first)
    second = PrefixCache.prefixes(TURN2)
    assert cache.lookup(second) == first[-1][1]  # everything the first turn sent


def test_an_entry_idle_past_its_ttl_is_a_miss() -> None:
    clock = Clock()
    cache = PromptCache(PromptCacheConfig(ttl_s=60.0), clock)
    cache.insert(PrefixCache.prefixes(TURN1))
    clock.now += 59.0
    assert cache.lookup(PrefixCache.prefixes(TURN2)) > 0  # ... and this use refreshes it
    clock.now += 59.0
    assert cache.lookup(PrefixCache.prefixes(TURN2)) > 0
    clock.now += 61.0
    assert cache.lookup(PrefixCache.prefixes(TURN2)) == 0


def test_the_least_recently_used_prefixes_go_beyond_max_entries() -> None:
    cache = PromptCache(PromptCacheConfig(max_entries=2))
    cache.insert(PrefixCache.prefixes(TURN1))  # two entries: [system], [system, user]
    other = PrefixCache.prefixes([{"role": "user", "content": "other"}])
    cache.insert(other)
    assert len(cache) == 2
    assert cache.lookup(other) > 0
    assert cache.lookup(PrefixCache.prefixes(TURN1)) == PrefixCache.prefixes(TURN1)[-1][1]  # the longest stayed
    assert cache.lookup(PrefixCache.prefixes([SYSTEM])) == 0  # the oldest entry went


def test_a_disabled_cache_never_hits() -> None:
    cache = PromptCache(PromptCacheConfig(enabled=False))
    cache.insert(PrefixCache.prefixes(TURN1))
    assert cache.lookup(PrefixCache.prefixes(TURN2)) == 0
    assert len(cache) == 0
