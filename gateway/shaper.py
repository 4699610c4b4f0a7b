"""The request shaper: paces requests to providers with rate limits, so that they never answer 429.

A provider's `rate_limits` in the catalogue (requests and tokens per minute for the gateway's key, as
its rate card states them) become token buckets: each refills at its per-minute rate up to a burst of
`burst_s` seconds' worth (default a minute's). A request costs one request and its estimated tokens
(prompt estimate + `max_tokens`, what providers count at admission).

Shared by every replica without a Redis round trip per request: each replica holds a small local
stock leased from the shared bucket in Redis (one hash per provider, `{<prefix>:shape}:<provider>`,
one key per script call: cluster-safe). A background task tops the stock up every `sync_s`, at once
when a request finds it empty, to what the waiting requests and the last interval's traffic need.
Stock unused for two intervals goes back to the bucket: a lease held while the bucket refills to its
cap would let the replicas together exceed the provider's own bucket. For the same reason the
shared bucket's cap is the burst less what refills in two intervals (a fraction of a request at
rate-card sizes).
Requests take from the local stock; when it is empty a request waits in a priority line
(`x-ultraroute-priority`, then arrival) for at most the wait the dispatcher allows -- short when there
is another candidate to spill to (skip reason `rate_limit`), the first-token budget when there is
not. Without Redis, or while it is unreachable, each replica refills its own bucket at the full rate
(several replicas may then together overshoot; the outage is logged once), and tries a lease again
every `RETRY_S`: the first that succeeds ends the outage.

Queue depth and wait time per endpoint are reported through `on_queue` (`ultraroute_queue_depth`,
`ultraroute_queue_wait_seconds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from gateway.background import Outage, cancel_and_wait
from gateway.capacity import PRIORITIES
from gateway.config import Endpoint, Provider
from gateway.redisconn import REDIS_FAILURES, connect

log = logging.getLogger("ultraroute.shaper")

# Per dimension (requests, then tokens), ARGV: rate/s, burst, want, give back. Returns the grants.
# KEYS[1] = the provider's hash. Fields: r (requests left), k (tokens left), at (last refill, Redis TIME).
LEASE_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1e6
local h = redis.call('HMGET', KEYS[1], 'r', 'k', 'at')
local dt = math.max(0, now - (tonumber(h[3]) or now))
local out = {}
local left = {}
for i = 0, 1 do
  local rate, burst = tonumber(ARGV[1 + 4*i]), tonumber(ARGV[2 + 4*i])
  local want, give = tonumber(ARGV[3 + 4*i]), tonumber(ARGV[4 + 4*i])
  local have = math.min(burst, (tonumber(h[1 + i]) or burst) + dt * rate + give)
  local grant = math.max(0, math.min(want, math.floor(have)))
  left[i + 1] = have - grant
  out[i + 1] = tostring(grant)
end
redis.call('HSET', KEYS[1], 'r', tostring(left[1]), 'k', tostring(left[2]), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], 3600)
return out
"""
UNLIMITED = 1e12
RETRY_S = 1.0  # while Redis is unreachable, a lease is tried this often


@dataclass(slots=True)
class _Bucket:
    """One provider's local stock of requests and tokens, and the requests waiting for it."""

    rate_r: float  # per second
    burst_r: float
    rate_k: float
    burst_k: float
    stock_r: float = 0.0
    stock_k: float = 0.0
    refilled: float = field(default_factory=time.monotonic)  # local mode: last refill
    leased: float = 0.0  # when the stock was last topped up from Redis
    demand: float = 0.0  # requests that asked since the last sync (taken, spilled or waiting)
    mean_tokens: float = 1024.0  # tokens a request costs, on average (a running mean)
    waiters: list[tuple[int, int, float, str, asyncio.Future[None]]] = field(default_factory=list)

    def take(self, tokens: float) -> bool:
        if self.stock_r >= 1.0 and self.stock_k >= tokens:
            self.stock_r -= 1.0
            self.stock_k -= tokens
            return True
        return False

    def refill_locally(self, now: float) -> None:
        dt = max(0.0, now - self.refilled)
        self.refilled = now
        self.stock_r = min(self.burst_r, self.stock_r + dt * self.rate_r)
        self.stock_k = min(self.burst_k, self.stock_k + dt * self.rate_k)


def estimated_tokens(prompt_chars: int, max_tokens: int | None, default_output: int = 512) -> int:
    """What a provider counts against tokens per minute at admission: the prompt (~4 chars a token)
    and the most the answer may be."""
    return prompt_chars // 4 + (max_tokens or default_output)


class Shaper:
    def __init__(self, providers: Iterable[Provider], redis_url: str | None = None, prefix: str = "ur",
                 sync_s: float = 0.1) -> None:
        self._buckets: dict[str, _Bucket] = {}
        for p in providers:
            limits = p.rate_limits
            if limits is None:
                continue
            rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
            burst = limits.burst_s / 60.0
            hold = 2 * sync_s  # stock older than this goes back (module doc)
            b = _Bucket(rate_r=rpm / 60 if rpm else UNLIMITED,
                        burst_r=max(1.0, rpm * burst - rpm / 60 * hold) if rpm else UNLIMITED,
                        rate_k=tpm / 60 if tpm else UNLIMITED,
                        burst_k=max(1.0, tpm * burst - tpm / 60 * hold) if tpm else UNLIMITED)
            if not redis_url:  # local buckets start full, like the provider's
                b.stock_r, b.stock_k = b.burst_r, b.burst_k
            b.stock_r = UNLIMITED if not rpm else b.stock_r
            b.stock_k = UNLIMITED if not tpm else b.stock_k
            self._buckets[p.name] = b
        self.sync_s = sync_s
        # Through the project's client factory (server, TLS, Sentinel, Cluster); no redis-py retries: a
        # lease sent twice would draw the provider's stock twice.
        self._redis = (connect(redis_url, timeout_s=0.5, decode_responses=True, retries=False)
                       if redis_url and self._buckets else None)
        self._prefix = prefix
        self._lease = self._redis.register_script(LEASE_SCRIPT) if self._redis is not None else None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._tried = 0.0  # when a lease was last tried during an outage
        self._order = itertools.count()
        self.outage = Outage(log, "rate-limit shaping", "each replica paces its providers alone")
        self.on_queue: Callable[[str, int, float | None], None] = lambda key, depth, waited: None

    def limits(self, endpoint: Endpoint) -> bool:
        return endpoint.provider.name in self._buckets

    def key(self, provider: str) -> str:
        return f"{{{self._prefix}:shape}}:{provider}"

    # -- request path --------------------------------------------------------------------------
    async def acquire(self, endpoint: Endpoint, tokens: int, priority: str = "normal",
                      max_wait_s: float = 0.0) -> bool:
        """Take one request and `tokens` from the provider's stock, waiting in line up to
        `max_wait_s`; False: the caller spills to another candidate."""
        b = self._buckets.get(endpoint.provider.name)
        if b is None:
            return True
        b.demand += 1
        b.mean_tokens += 0.2 * (tokens - b.mean_tokens)
        if self._local_mode:
            b.refill_locally(time.monotonic())
        if not b.waiters and b.take(tokens):
            return True
        self._wake.set()
        if max_wait_s <= 0:
            return False
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (PRIORITIES.get(priority, 1), next(self._order), float(tokens), endpoint.key, waiter)
        heapq.heappush(b.waiters, entry)
        self.on_queue(endpoint.key, self._depth(endpoint.key, b), None)
        started = time.perf_counter()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), max_wait_s)
            return True
        except TimeoutError:
            return waiter.done() and not waiter.cancelled()  # granted just as the wait ran out
        finally:
            if entry in b.waiters:
                b.waiters.remove(entry)
                heapq.heapify(b.waiters)
                waiter.cancel()
            self.on_queue(endpoint.key, self._depth(endpoint.key, b), time.perf_counter() - started)

    @staticmethod
    def _depth(endpoint_key: str, b: _Bucket) -> int:
        return sum(1 for w in b.waiters if w[3] == endpoint_key)

    def _serve_waiters(self, b: _Bucket) -> None:
        """Hand the stock to waiting requests, highest priority first."""
        while b.waiters and b.take(b.waiters[0][2]):
            _, _, _, _, waiter = heapq.heappop(b.waiters)
            if not waiter.done():
                waiter.set_result(None)

    # -- background ----------------------------------------------------------------------------
    @property
    def _local_mode(self) -> bool:
        return self._lease is None or self.outage.down

    async def start(self) -> None:
        if self._buckets:
            self._task = asyncio.create_task(self._run(), name="ultraroute-shaper")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._redis is not None:
            await self._redis.aclose()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.sync_s)
            self._wake.clear()
            try:
                await self.sync()
            except Exception:  # a bug here must not stop pacing for good
                log.exception("rate-limit shaping: sync failed")
                await asyncio.sleep(self.sync_s)

    async def sync(self) -> None:
        """Top every stock up (lease from Redis, or refill locally) and serve the waiting requests."""
        now = time.monotonic()
        retry = self.outage.down and now - self._tried >= RETRY_S
        if retry:
            self._tried = now
        for name, b in self._buckets.items():
            if self._local_mode:
                b.refill_locally(now)
            if self._lease is not None and (not self.outage.down or retry):
                await self._lease_for(name, b, probe=retry)
                retry = False  # one probe a round: after it Redis is either back or still down
            self._serve_waiters(b)
            b.demand = 0.0

    async def _lease_for(self, name: str, b: _Bucket, probe: bool = False) -> None:
        """Lease what `b` needs from the shared bucket (`probe`: call Redis even for nothing, to learn
        whether it is back)."""
        limited_r, limited_k = b.rate_r < UNLIMITED, b.rate_k < UNLIMITED
        now = time.monotonic()
        give_r = give_k = 0.0
        if not b.waiters and now - b.leased > 2 * self.sync_s:
            give_r, give_k = (b.stock_r if limited_r else 0.0), (b.stock_k if limited_k else 0.0)
        # Enough for the waiting requests and for the last interval's traffic again.
        need_r = len(b.waiters) + b.demand
        need_k = sum(w[2] for w in b.waiters) + b.demand * b.mean_tokens
        want_r = math.ceil(max(0.0, need_r - b.stock_r + give_r)) if limited_r else 0
        want_k = math.ceil(max(0.0, need_k - b.stock_k + give_k)) if limited_k else 0
        if not (want_r or want_k or give_r or give_k or probe):
            return
        args = [b.rate_r, b.burst_r, want_r, give_r] if limited_r else [0, 0, 0, 0]
        args += [b.rate_k, b.burst_k, want_k, give_k] if limited_k else [0, 0, 0, 0]
        try:
            grant = await self._lease(keys=[self.key(name)], args=args)  # type: ignore[misc]
        except REDIS_FAILURES as exc:
            self.outage.failed(exc)
            b.refilled = time.monotonic()  # local refill from now on, not for the time before
            return
        self.outage.ok()
        if limited_r:
            b.stock_r += float(grant[0]) - give_r
        if limited_k:
            b.stock_k += float(grant[1]) - give_k
        if want_r or want_k:
            b.leased = now
