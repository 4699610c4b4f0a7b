"""A simulated provider's prompt cache: message prefixes it has seen, with a time to live and a size.

Does: remember the chained hashes of a request's leading messages (`PrefixCache.prefixes` in
content.py hashes them once per request) with the prompt tokens each covers; answer how many of a new
request's prompt tokens are cached -- the longest remembered prefix -- as a provider reports it in
`usage.prompt_tokens_details.cached_tokens`; forget entries idle for `ttl_s` (as providers evict after
minutes) and the least recently used beyond `max_entries`. Disabled (`enabled: false`), nothing is
ever cached: a host that prefills fast instead of caching.
Does not: time anything itself (the endpoint prices cached and uncached tokens: config.py), or know
about HTTP.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field


class PromptCacheConfig(BaseModel):
    """`prompt_cache:` of an endpoint profile. The defaults are the simulator's earlier fixed cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = True
    ttl_s: float | None = Field(None, gt=0.0)  # None: entries never expire
    max_entries: int = Field(8192, ge=1)  # one entry per cached prefix (message count)


class PromptCache:
    """LRU of prefix hash -> (prompt tokens of that prefix, last use), with a TTL."""

    def __init__(self, config: PromptCacheConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config or PromptCacheConfig()
        self._clock = clock
        self._entries: OrderedDict[bytes, tuple[int, float]] = OrderedDict()

    def clear(self) -> None:
        self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prefixes: list[tuple[bytes, int]]) -> int:
        """Prompt tokens of the longest live prefix seen before (0 if none); refreshes its recency."""
        if not self.config.enabled:
            return 0
        ttl = self.config.ttl_s
        now = self._clock()
        for digest, tokens in reversed(prefixes):
            hit = self._entries.get(digest)
            if hit is None:
                continue
            if ttl is not None and now - hit[1] > ttl:
                del self._entries[digest]  # expired: a miss, as at the provider
                continue
            self._entries[digest] = (hit[0], now)
            self._entries.move_to_end(digest)
            return tokens
        return 0

    def insert(self, prefixes: list[tuple[bytes, int]]) -> None:
        """Remember every prefix of the request just served (the next turn extends one of them)."""
        if not self.config.enabled:
            return
        now = self._clock()
        entries = self._entries
        for digest, tokens in prefixes:
            entries[digest] = (tokens, now)
            entries.move_to_end(digest)
        limit = self.config.max_entries
        while len(entries) > limit:
            entries.popitem(last=False)
