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
not. Health probes and warm-up measures take their turn too, last in line (dispatch.py `probe`):
they spend the provider's limit as any request does. Without Redis, or while it is unreachable, each
replica refills its own bucket at the full rate (several replicas may then together overshoot; the
outage is logged once), and tries a lease again every `RETRY_S`: the first that succeeds ends the
outage.

Queue depth and wait time per endpoint are reported through `on_queue` (`ultraroute_queue_depth`,
`ultraroute_queue_wait_seconds`).

Learned limits (`learn()`): every answer's rate-limit headers (limit_headers.py; 200s and 429s) say
the provider's per-minute limits and what is left. A provider without `rate_limits` in the catalogue
gets a bucket of the limits it states (`-limit`, a minute's burst), as if the catalogue had said
them, and follows the provider when they change. Any provider's stock, learned or from the
catalogue, is held within what the provider last said `remaining` (less what was taken since) until
that limit's reset: never more than the provider will admit. The catalogue's `rate_limits`, when
set, are the rates (a provider's headers may describe an organisation-wide limit the gateway's key
shares, or be missing on some answers); the headers only ever lower the stock.
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
from typing import Any

from gateway.background import Outage, cancel_and_wait
from gateway.capacity import PRIORITIES
from gateway.config import Endpoint, Provider
from gateway.redisconn import REDIS_FAILURES, connect
from gateway.upstreams.limit_headers import Quota, Reported

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
LEARNED_BURST_S = 60.0  # a learned limit's bucket holds a minute's worth, as providers' do


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
    # What the provider last said is left (less what was taken since), until when (monotonic; 0: no cap).
    cap_r: float = UNLIMITED
    cap_k: float = UNLIMITED
    cap_r_until: float = 0.0
    cap_k_until: float = 0.0

    def take(self, tokens: float) -> bool:
        if self.stock_r >= 1.0 and self.stock_k >= tokens:
            self.stock_r -= 1.0
            self.stock_k -= tokens
            self.cap_r -= 1.0
            self.cap_k -= tokens
            return True
        return False

    def refill_locally(self, now: float) -> None:
        dt = max(0.0, now - self.refilled)
        self.refilled = now
        self.stock_r = min(self.burst_r, self.stock_r + dt * self.rate_r)
        self.stock_k = min(self.burst_k, self.stock_k + dt * self.rate_k)
        self.clamp(now)

    def hold(self, requests: Quota | None, tokens: Quota | None, now: float) -> None:
        """The provider says what is left until its reset: the stock stays within it. A report of
        more than the cap in force (an answer admitted before others now in flight) does not raise it."""
        self.cap_r, self.cap_r_until = _held(self.cap_r, self.cap_r_until, requests, now)
        self.cap_k, self.cap_k_until = _held(self.cap_k, self.cap_k_until, tokens, now)
        self.clamp(now)

    def clamp(self, now: float) -> None:
        """Keep the stock within the provider's word; once a limit has reset, drop its cap (a
        dimension the gateway does not pace is unlimited again)."""
        if self.cap_r_until:
            if now >= self.cap_r_until:
                self.cap_r, self.cap_r_until = UNLIMITED, 0.0
                if self.rate_r >= UNLIMITED:
                    self.stock_r = UNLIMITED
            else:
                self.stock_r = max(0.0, min(self.stock_r, self.cap_r))
        if self.cap_k_until:
            if now >= self.cap_k_until:
                self.cap_k, self.cap_k_until = UNLIMITED, 0.0
                if self.rate_k >= UNLIMITED:
                    self.stock_k = UNLIMITED
            else:
                self.stock_k = max(0.0, min(self.stock_k, self.cap_k))

    def view(self) -> dict[str, float | None]:
        """Per-minute limits, and what the provider last said is left while that holds."""
        return {"requests_per_minute": round(self.rate_r * 60) if self.rate_r < UNLIMITED else None,
                "tokens_per_minute": round(self.rate_k * 60) if self.rate_k < UNLIMITED else None,
                "requests_left": max(0, math.floor(self.cap_r)) if self.cap_r_until else None,
                "tokens_left": max(0, math.floor(self.cap_k)) if self.cap_k_until else None}


def _held(cap: float, until: float, quota: Quota | None, now: float) -> tuple[float, float]:
    """A cap and its end after a provider's report `quota` (a lower one, or the first after a reset, wins)."""
    if quota is None or quota.remaining is None or (now < until and cap <= quota.remaining):
        return cap, until
    return float(quota.remaining), now + (quota.reset_s if quota.reset_s is not None else 1.0)


def _bucket(rpm: int | None, tpm: int | None, burst_s: float, sync_s: float, local: bool) -> _Bucket:
    """A provider's bucket for `rpm` requests and `tpm` tokens a minute (None: not limited)."""
    burst = burst_s / 60.0
    hold = 2 * sync_s  # stock older than this goes back (module doc)
    b = _Bucket(rate_r=rpm / 60 if rpm else UNLIMITED,
                burst_r=max(1.0, rpm * burst - rpm / 60 * hold) if rpm else UNLIMITED,
                rate_k=tpm / 60 if tpm else UNLIMITED,
                burst_k=max(1.0, tpm * burst - tpm / 60 * hold) if tpm else UNLIMITED)
    if local:  # local buckets start full, like the provider's
        b.stock_r, b.stock_k = b.burst_r, b.burst_k
    b.stock_r = UNLIMITED if not rpm else b.stock_r
    b.stock_k = UNLIMITED if not tpm else b.stock_k
    return b


def estimated_tokens(prompt_chars: int, max_tokens: int | None, default_output: int = 512) -> int:
    """What a provider counts against tokens per minute at admission: the prompt (~4 chars a token)
    and the most the answer may be."""
    return prompt_chars // 4 + (max_tokens or default_output)


class Shaper:
    def __init__(self, providers: Iterable[Provider], redis_url: str | None = None, prefix: str = "ur",
                 sync_s: float = 0.1) -> None:
        self._buckets: dict[str, _Bucket] = {}
        self._learned: dict[str, tuple[int | None, int | None]] = {}  # provider -> the (rpm, tpm) it stated
        for p in providers:
            limits = p.rate_limits
            if limits is not None:
                self._buckets[p.name] = _bucket(limits.requests_per_minute, limits.tokens_per_minute,
                                                limits.burst_s, sync_s, local=not redis_url)
        self.sync_s = sync_s
        self._redis_url = redis_url
        self._redis: Any = None
        self._lease: Any = None
        self._prefix = prefix
        if self._buckets:
            self._connect()
        self._running = False  # start() was called: a learned bucket starts the background task
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._tried = 0.0  # when a lease was last tried during an outage
        self._order = itertools.count()
        self.outage = Outage(log, "rate-limit shaping", "each replica paces its providers alone")
        self.on_queue: Callable[[str, int, float | None], None] = lambda key, depth, waited: None

    def _connect(self) -> None:
        # Through the project's client factory (server, TLS, Sentinel, Cluster); no redis-py retries: a
        # lease sent twice would draw the provider's stock twice.
        if self._redis_url and self._redis is None:
            self._redis = connect(self._redis_url, timeout_s=0.5, decode_responses=True, retries=False)
            self._lease = self._redis.register_script(LEASE_SCRIPT)

    def limits(self, endpoint: Endpoint) -> bool:
        return endpoint.provider.name in self._buckets

    def learn(self, provider: Provider, reported: Reported) -> None:
        """What one of `provider`'s answers said of its limits (module doc: learned limits)."""
        name = provider.name
        requests, tokens = reported.requests, reported.tokens
        b = self._buckets.get(name)
        if provider.rate_limits is None:
            stated = (requests.limit if requests else None, tokens.limit if tokens else None)
            if (stated[0] or stated[1]) and self._learned.get(name) != stated:
                b = self._learn_bucket(name, b, *stated)
        if b is not None:
            b.hold(requests, tokens, time.monotonic())

    def _learn_bucket(self, name: str, old: _Bucket | None, rpm: int | None, tpm: int | None) -> _Bucket:
        """A bucket for limits a provider stated; one it stated before keeps its stock and its line."""
        self._connect()
        b = _bucket(rpm, tpm, LEARNED_BURST_S, self.sync_s, local=self._local_mode)
        if old is not None:
            b.stock_r, b.stock_k = min(old.stock_r, b.burst_r), min(old.stock_k, b.burst_k)
            b.waiters, b.demand, b.mean_tokens = old.waiters, old.demand, old.mean_tokens
            b.cap_r, b.cap_k, b.cap_r_until, b.cap_k_until = old.cap_r, old.cap_k, old.cap_r_until, old.cap_k_until
        self._buckets[name] = b
        self._learned[name] = (rpm, tpm)
        log.info("rate limits of %s learned from its headers: %s requests, %s tokens a minute", name,
                 rpm or "no limit on", tpm or "no limit on")
        if self._running and self._task is None:
            self._task = asyncio.create_task(self._run(), name="ultraroute-shaper")
        return b

    def view(self, provider: str) -> dict[str, Any] | None:
        """The limits the shaper paces `provider` by, and where they come from (`/v1/endpoints`)."""
        b = self._buckets.get(provider)
        if b is None:
            return None
        return {"source": "learned" if provider in self._learned else "catalogue", **b.view()}

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
        self._running = True
        if self._buckets:
            self._task = asyncio.create_task(self._run(), name="ultraroute-shaper")

    async def stop(self) -> None:
        self._running = False
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
        for name, b in list(self._buckets.items()):  # a bucket may be learned during a lease
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
        want_r = math.ceil(max(0.0, min(need_r, b.cap_r) - b.stock_r + give_r)) if limited_r else 0
        want_k = math.ceil(max(0.0, min(need_k, b.cap_k) - b.stock_k + give_k)) if limited_k else 0
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
        b.clamp(time.monotonic())
        if want_r or want_k:
            b.leased = now
