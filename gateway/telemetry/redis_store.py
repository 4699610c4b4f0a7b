"""A telemetry store shared by all gateway replicas through Redis, without Redis on the request path.

What it does: `record()`/`begin()`/`end()`/`stats()` work on local memory only (see `StoreBase`). One
background task per store
  * flushes this replica's pending deltas (buckets of samples recorded since the last flush) with one
    pipelined round trip per `flush_interval_s`: HINCRBY/HINCRBYFLOAT into shared per-endpoint,
    per-time-bucket hashes (every key gets a TTL), plus this replica's in-flight counts, the endpoint
    directory and the replica directory;
  * refreshes the merged view (all replicas' data, this one's included) with one pipelined round trip
    per `refresh_interval_s`. A bucket is re-read while it can still change (the current bucket and
    the previous one until `settle_s` after its end); once settled it is read one last time and then
    cached, so a refresh costs O(endpoints), not O(window length). Writers that flush into an already
    settled bucket (e.g. after an outage) leave a "late" marker so readers re-read that bucket.
`stats()` = merged Redis view + this replica's deltas not yet flushed (nothing double counted).

Redis key layout (prefix `P`, default "ur:tel"):
  P:b:<endpoint_key>:<bucket>  hash   additive fields, see `Bucket.to_fields`; TTL: bucket end + bucket_ttl_s
  P:endpoints                  zset   endpoint_key -> newest sample time (ZADD GT); TTL bucket_ttl_s
  P:inflight:<replica_id>      hash   endpoint_key -> in-flight count on that replica; TTL ~3 flushes
  P:replicas                   zset   replica_id -> last flush time; TTL 60 s
  P:late                       zset   "<endpoint_key>|<bucket>" -> time of a late write; TTL 240 s

When Redis is down: the request path is unaffected; `stats()` shows the last merged view plus every
local sample since (pending deltas keep accumulating, bounded: buckets older than the longest window
are dropped, and at most `max_pending_buckets` are kept, oldest dropped first). The outage is logged
once (and its end once), `redis_errors` counts failed round trips, and the task retries with backoff
(0.1 s doubling to 2 s); pending deltas are flushed once Redis answers again.

Delivery: a flush that cannot connect, or finds its connection closed/reset, is sent again later (the
usual outage case: nothing was applied). A flush that times out after sending is assumed applied and
is not re-sent (a slow Redis must not make us count twice). The remaining ambiguity: Redis applying a
batch and the connection dropping before the reply, which re-sends (counts twice) at most one flush.

What it does not do: no Redis Cluster support (keys are not hash-tagged), no persistence of local
state across restarts, no clock synchronisation (replica clocks must agree within ~settle_s / 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from gateway.telemetry.sample import AttemptSample
from gateway.telemetry.store import (
    DEFAULT_CACHE_TTL_S,
    DEFAULT_EWMA_ALPHA,
    Clock,
    StoreBase,
)
from gateway.telemetry.window import DEFAULT_BUCKET_S, DEFAULT_MAX_WINDOW_S, Bucket, EndpointWindows

logger = logging.getLogger("ultraroute.telemetry")

_REDIS_FAILURES = (RedisError, OSError, asyncio.TimeoutError)
BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 2.0
REPLICA_TTL_S = 60
LATE_KEEP_S = 120.0

Batch = dict[str, EndpointWindows]


def _estimate_commands(b: Bucket) -> int:
    """Commands one bucket costs in a flush: its hash fields plus EXPIRE and directory updates."""
    return len(b.n) + 6 + len(b.ttft_ms) + len(b.ttfat_ms) + len(b.decode_tps) + len(b.e2e_ms) + 4


class RedisStore(StoreBase):
    """Telemetry shared across replicas through Redis; see the module docstring for the design."""

    def __init__(
        self,
        url: str,
        *,
        replica_id: str,
        flush_interval_s: float = 0.5,
        refresh_interval_s: float = 0.5,
        key_prefix: str = "ur:tel",
        bucket_ttl_s: int = 2400,
        clock: Clock = time.time,
        bucket_s: float = DEFAULT_BUCKET_S,
        max_window_s: float = DEFAULT_MAX_WINDOW_S,
        cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
        ewma_alpha: float = DEFAULT_EWMA_ALPHA,
        socket_timeout_s: float = 0.5,
        settle_s: float | None = None,
        max_reads_per_refresh: int = 2000,
        max_pending_buckets: int = 50_000,
        max_commands_per_flush: int = 10_000,
    ) -> None:
        super().__init__(clock=clock, bucket_s=bucket_s, max_window_s=max_window_s, cache_ttl_s=cache_ttl_s,
                         ewma_alpha=ewma_alpha)
        if bucket_ttl_s <= max_window_s + bucket_s:
            raise ValueError("bucket_ttl_s must exceed max_window_s + bucket_s")
        self.url = url
        self.replica_id = replica_id
        self.flush_interval_s = float(flush_interval_s)
        self.refresh_interval_s = float(refresh_interval_s)
        self.key_prefix = key_prefix
        self.bucket_ttl_s = int(bucket_ttl_s)
        self.socket_timeout_s = float(socket_timeout_s)
        self.settle_s = float(settle_s) if settle_s is not None else max(5.0, 4 * self.flush_interval_s)
        self.inflight_ttl_s = max(2, math.ceil(3 * self.flush_interval_s))
        self.max_reads_per_refresh = int(max_reads_per_refresh)
        self.max_pending_buckets = int(max_pending_buckets)
        self.max_commands_per_flush = int(max_commands_per_flush)

        # Counters for a metrics exporter.
        self.redis_errors = 0  # failed round trips (flush or refresh)
        self.flushes = 0  # successful flush round trips
        self.refreshes = 0  # successful refresh round trips
        self.dropped_buckets = 0  # pending buckets dropped to stay bounded during an outage

        self._remote: dict[str, EndpointWindows] = {}  # merged view read from Redis (+ own flushes)
        self._pending: Batch = {}  # recorded here, not yet sent
        self._flushing: Batch | None = None  # being sent right now
        self._known: dict[str, float] = {}  # endpoint -> newest sample time, from P:endpoints
        # endpoint -> (lo, hi): settled buckets lo..hi have had their final read (cached from then on)
        self._cold_done: dict[str, tuple[int, int]] = {}
        self._reread: set[tuple[str, int]] = set()  # settled buckets to read again (late writes)
        self._late_seen: dict[str, float] = {}
        self._replicas: list[str] = []  # other live replicas
        self._others_in_flight: dict[str, int] = {}

        self._client: aioredis.Redis | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._healthy = True
        self._outage_started = 0.0
        self._backoff = 0.0

    # -- keys ---------------------------------------------------------------------------------------
    def bucket_key(self, endpoint_key: str, idx: int) -> str:
        return f"{self.key_prefix}:b:{endpoint_key}:{idx}"

    def inflight_key(self, replica_id: str) -> str:
        return f"{self.key_prefix}:inflight:{replica_id}"

    @property
    def endpoints_key(self) -> str:
        return f"{self.key_prefix}:endpoints"

    @property
    def replicas_key(self) -> str:
        return f"{self.key_prefix}:replicas"

    @property
    def late_key(self) -> str:
        return f"{self.key_prefix}:late"

    @property
    def connected(self) -> bool:
        """False from the first failed round trip of an outage until the next successful one."""
        return self._healthy

    # -- StoreBase hooks (request path: memory only) -------------------------------------------------
    def _add(self, key: str, sample: AttemptSample, t: float) -> None:
        w = self._pending.get(key)
        if w is None:
            w = self._pending[key] = self._new_windows()
        w.add(sample, t)

    def _aggregate(self, key: str, now: float, window_s: float) -> tuple[Bucket, float | None, float]:
        w = self._clamp(window_s)
        out: Bucket | None = None
        newest = self._known.get(key)
        flushing = self._flushing
        for src in (self._remote.get(key), self._pending.get(key), flushing.get(key) if flushing else None):
            if src is None:
                continue
            b = src.aggregate(now, w)
            if out is None:
                out = b
            else:
                out.merge(b)
            if src.newest is not None and (newest is None or src.newest > newest):
                newest = src.newest
        return (out if out is not None else Bucket()), newest, w

    def _remote_in_flight(self, key: str) -> int:
        return self._others_in_flight.get(key, 0)

    def _prune(self, now: float) -> None:
        for key in list(self._remote):
            w = self._remote[key]
            w.prune(now)
            if not w.buckets and key not in self._known:
                del self._remote[key]
                self._cold_done.pop(key, None)
        for key in list(self._pending):
            w = self._pending[key]
            self.dropped_buckets += w.prune(now)
            if not w.buckets:
                del self._pending[key]
        for key in [k for k in self._cold_done if k not in self._known]:
            del self._cold_done[key]

    def _data_keys(self) -> set[str]:
        keys = set(self._remote) | set(self._pending) | set(self._known)
        if self._flushing:
            keys |= set(self._flushing)
        return keys

    # -- lifecycle ------------------------------------------------------------------------------------
    async def start(self) -> None:
        """Start the background flush/refresh task. Does not wait for Redis; never raises for it."""
        if self._task is not None:
            return
        self._stopping = False
        if self._client is None:
            self._client = aioredis.from_url(
                self.url,
                decode_responses=True,
                socket_timeout=self.socket_timeout_s,
                socket_connect_timeout=self.socket_timeout_s,
                retry=Retry(NoBackoff(), 0),  # we retry ourselves; a hidden retry could double-count
                health_check_interval=0,
            )
        self._task = asyncio.create_task(self._run(), name=f"telemetry-redis-{self.replica_id}")

    async def stop(self) -> None:
        """Stop the task, flush what is pending (best effort, bounded time), close the client."""
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # The loop also checks `_stopping`, in case a library swallowed the cancellation.
            await asyncio.wait({task}, timeout=2.0 + self.socket_timeout_s)
        if self._client is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._final_flush(), timeout=2.0)
            with contextlib.suppress(Exception):
                await self._client.aclose()
            self._client = None

    async def _final_flush(self) -> None:
        while await self._flush(final=True):
            pass

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_flush = next_refresh = loop.time()
        while not self._stopping:
            try:
                now = loop.time()
                if now >= next_flush:
                    more = await self._flush()
                    next_flush = now + (0.01 if more else self.flush_interval_s)
                if now >= next_refresh:
                    more = await self._refresh()
                    next_refresh = now + (0.01 if more else self.refresh_interval_s)
                self._on_success()
                delay = max(0.0, min(next_flush, next_refresh) - loop.time())
            except asyncio.CancelledError:
                raise
            except _REDIS_FAILURES as exc:
                if self._stopping:
                    break
                self._on_error(exc)
                delay = self._backoff
                next_flush = next_refresh = 0.0
            except Exception:  # a bug: keep the loop alive, never crash the gateway
                self._log_error("redis background task")
                self._backoff = min(BACKOFF_MAX_S, max(BACKOFF_START_S, self._backoff * 2))
                delay = self._backoff
            await asyncio.sleep(delay)

    def _on_error(self, exc: BaseException) -> None:
        self.redis_errors += 1
        self._backoff = min(BACKOFF_MAX_S, max(BACKOFF_START_S, self._backoff * 2))
        if self._healthy:
            self._healthy = False
            self._outage_started = time.monotonic()
            logger.warning("telemetry[%s]: Redis unreachable (%s: %s); sharing paused, using local data, "
                           "retrying with backoff", self.replica_id, type(exc).__name__, exc)

    def _on_success(self) -> None:
        self._backoff = 0.0
        if not self._healthy:
            self._healthy = True
            logger.info("telemetry[%s]: Redis reachable again after %.1fs (%d failed round trips so far); "
                        "sharing resumed", self.replica_id, time.monotonic() - self._outage_started,
                        self.redis_errors)

    # -- flush --------------------------------------------------------------------------------------
    def _bound_pending(self, now: float) -> None:
        total = 0
        for key in list(self._pending):
            w = self._pending[key]
            self.dropped_buckets += w.prune(now)
            if not w.buckets:
                del self._pending[key]
            total += len(w.buckets)
        if total > self.max_pending_buckets:
            order = sorted((idx, key) for key, w in self._pending.items() for idx in w.buckets)
            for idx, key in order[: total - self.max_pending_buckets]:
                w = self._pending[key]
                w.set_bucket(idx, None)
                self.dropped_buckets += 1
                if not w.buckets:
                    del self._pending[key]

    def _requeue(self, batch: Batch) -> None:
        """A flush that sent nothing: put its deltas back in front of what was recorded meanwhile."""
        for key, w in self._pending.items():
            target = batch.get(key)
            if target is None:
                batch[key] = w
            else:
                target.merge_windows(w)
        self._pending = batch

    def _apply_to_view(self, batch: Batch) -> None:
        """Sent deltas are now in Redis: keep them in the merged view until the next read of it."""
        for key, w in batch.items():
            view = self._remote.get(key)
            if view is None:
                view = self._remote[key] = self._new_windows()
            view.merge_windows(w)

    def _take_batch(self) -> tuple[Batch, Batch]:
        """Split pending deltas into (send now, keep pending) so one flush stays under
        `max_commands_per_flush` (a backlog after an outage goes out over several round trips)."""
        pending = self._pending
        budget = self.max_commands_per_flush
        sizes: list[tuple[int, str, int]] = []  # (bucket, key, estimated commands)
        total = 0
        for key, w in pending.items():
            for idx, b in w.buckets.items():
                n = _estimate_commands(b)
                sizes.append((idx, key, n))
                total += n
        if total <= budget:
            return pending, {}
        batch: Batch = {}
        sizes.sort(reverse=True)  # newest buckets first
        used = 0
        for idx, key, n in sizes:
            if used and used + n > budget:
                break
            used += n
            src = pending[key]
            dst = batch.get(key)
            if dst is None:
                dst = batch[key] = self._new_windows()
                dst.newest = src.newest
            dst.buckets[idx] = src.buckets[idx]
            src.set_bucket(idx, None)
        rest = {k: w for k, w in pending.items() if w.buckets}
        return batch, rest

    async def _flush(self, final: bool = False) -> bool:
        """Send pending deltas (one round trip). Returns True if some are left for another one."""
        client = self._client
        if client is None:
            return False
        now = self.clock()
        self._bound_pending(now)
        batch, self._pending = self._take_batch()
        more = bool(self._pending)
        self._flushing = batch
        try:
            pipe = client.pipeline(transaction=False)
            self._queue_writes(pipe, batch, now, final)
            try:
                # Connect first: if that fails nothing was sent and the batch is safely retried.
                pool = client.connection_pool
                conn = await pool.get_connection()
                await pool.release(conn)
            except BaseException:
                self._requeue(batch)
                raise
            try:
                await pipe.execute()
            except (RedisConnectionError, ConnectionError):
                # The connection was found closed or reset: Redis did not take the batch (or went
                # down with it). Send it again later.
                self._requeue(batch)
                raise
            except BaseException:
                # Timed out (or cancelled) after sending: Redis probably applied it. Never send twice.
                self._apply_to_view(batch)
                raise
            self._apply_to_view(batch)
            self.flushes += 1
            return more
        finally:
            self._flushing = None

    def _queue_writes(self, pipe: Any, batch: Batch, now: float, final: bool) -> None:
        bs = self.bucket_s
        late_after = self.settle_s / 2
        any_late = False
        for key, w in batch.items():
            for idx, b in w.buckets.items():
                end = (idx + 1) * bs
                ttl = int(end + self.bucket_ttl_s - now)
                if ttl <= 0:
                    continue
                rk = self.bucket_key(key, idx)
                for f, v in b.to_fields().items():
                    if type(v) is int:
                        pipe.hincrby(rk, f, v)
                    else:
                        pipe.hincrbyfloat(rk, f, v)
                pipe.expire(rk, ttl)
                if now >= end + late_after:
                    pipe.zadd(self.late_key, {f"{key}|{idx}": now})
                    any_late = True
            if w.newest is not None:
                pipe.zadd(self.endpoints_key, {key: w.newest}, gt=True)
        if batch:
            pipe.zremrangebyscore(self.endpoints_key, "-inf", now - self.bucket_ttl_s)
            pipe.expire(self.endpoints_key, self.bucket_ttl_s)
        if any_late:
            pipe.zremrangebyscore(self.late_key, "-inf", now - LATE_KEEP_S)
            pipe.expire(self.late_key, int(2 * LATE_KEEP_S))
        ik = self.inflight_key(self.replica_id)
        if final:
            pipe.delete(ik)
            pipe.zrem(self.replicas_key, self.replica_id)
        else:
            counts = {k: loc.in_flight for k, loc in self._local.items()}
            if counts:
                pipe.hset(ik, mapping=counts)
                pipe.expire(ik, self.inflight_ttl_s)
            pipe.zadd(self.replicas_key, {self.replica_id: now})
            pipe.zremrangebyscore(self.replicas_key, "-inf", now - REPLICA_TTL_S)
            pipe.expire(self.replicas_key, REPLICA_TTL_S)

    # -- refresh ------------------------------------------------------------------------------------
    def _plan_reads(self, now: float) -> tuple[list[tuple[str, int]], bool]:
        """Buckets to read this round, and whether settled buckets were left for the next rounds.

        Order: buckets with a late write, buckets that can still change (read every round), buckets
        that just settled (their final read), then older settled buckets never read, newest first,
        within `max_reads_per_refresh`. Buckets after an endpoint's newest sample hold no data and are
        not read.
        """
        bs = self.bucket_s
        cur = int(now // bs)
        lo = int((now - self.max_window_s) // bs)
        settled_upto = int((now - self.settle_s) // bs) - 1  # idx <= this: no on-time write any more
        self._reread = {(k, i) for (k, i) in self._reread if lo <= i <= cur and k in self._known}
        reads: list[tuple[str, int]] = sorted(self._reread)
        backlog: list[tuple[int, str]] = []
        for key, newest in self._known.items():
            top = min(cur, int(newest // bs))  # buckets after the newest sample hold nothing
            done_lo, done_hi = self._cold_done.get(key, (settled_upto + 1, settled_upto))
            if done_hi < lo - 1 or done_lo > done_hi + 1:  # out of retention (or invalid): start over
                done_lo, done_hi = settled_upto + 1, settled_upto
            if done_hi >= top:  # settled buckets above the newest sample are empty: done
                done_hi = max(done_hi, settled_upto)
            if done_lo > top + 1:
                done_lo = max(lo, top + 1)
            self._cold_done[key] = (done_lo, done_hi)
            for idx in range(max(done_hi + 1, lo), min(settled_upto, top) + 1):
                reads.append((key, idx))  # just settled: its final read
            for idx in range(max(settled_upto + 1, lo), top + 1):
                reads.append((key, idx))  # can still change: read every round
            for idx in range(min(done_lo - 1, top), lo - 1, -1):
                backlog.append((idx, key))  # settled, never read
                if len(backlog) > 4 * self.max_reads_per_refresh:
                    break
        budget = max(0, self.max_reads_per_refresh - len(reads))
        backlog.sort(reverse=True)  # newest settled buckets first
        reads.extend((key, idx) for idx, key in backlog[:budget])
        return reads, len(backlog) > budget

    async def _refresh(self) -> bool:
        """Read the merged view. Returns True if another refresh should follow soon."""
        client = self._client
        if client is None:
            return False
        now = self.clock()
        bs = self.bucket_s
        reads, more = self._plan_reads(now)
        others = [r for r in self._replicas if r != self.replica_id]
        pipe = client.pipeline(transaction=False)
        pipe.zrangebyscore(self.endpoints_key, now - self.max_window_s - 2 * bs, "+inf", withscores=True)
        pipe.zrangebyscore(self.replicas_key, now - REPLICA_TTL_S, "+inf")
        pipe.zrangebyscore(self.late_key, now - LATE_KEEP_S, "+inf", withscores=True)
        for r in others:
            pipe.hgetall(self.inflight_key(r))
        for key, idx in reads:
            pipe.hgetall(self.bucket_key(key, idx))
        res = await pipe.execute()
        self.refreshes += 1

        endpoints: list[tuple[str, float]] = res[0]
        replicas: list[str] = res[1]
        late: list[tuple[str, float]] = res[2]
        known = {k: float(s) for k, s in endpoints}
        new_keys = any(k not in self._known for k in known)
        self._known = known
        for k, s in known.items():
            view = self._remote.get(k)
            if view is not None:
                view.note_newest(s)
        new_replicas = bool(set(replicas) - set(self._replicas))
        self._replicas = replicas

        seen: dict[str, float] = {}
        for member, score in late:
            seen[member] = score
            if self._late_seen.get(member) != score:
                key, _, idx_s = member.rpartition("|")
                with contextlib.suppress(ValueError):
                    self._reread.add((key, int(idx_s)))
        self._late_seen = seen

        off = 3
        sums: dict[str, int] = {}
        for h in res[off: off + len(others)]:
            for k, v in h.items():
                with contextlib.suppress(ValueError):
                    sums[k] = sums.get(k, 0) + int(v)
        self._others_in_flight = sums
        off += len(others)

        settled_upto = int((now - self.settle_s) // bs) - 1
        for (key, idx), h in zip(reads, res[off:], strict=True):
            view = self._remote.get(key)
            if view is None:
                view = self._remote[key] = self._new_windows()
            view.set_bucket(idx, Bucket.from_fields(h) if h else None)
            self._reread.discard((key, idx))
            if idx <= settled_upto:
                done_lo, done_hi = self._cold_done.get(key, (idx, idx - 1))
                if idx == done_hi + 1:
                    done_hi = idx
                if idx == done_lo - 1:
                    done_lo = idx
                self._cold_done[key] = (done_lo, max(done_hi, done_lo - 1))
        return more or new_keys or new_replicas or bool(self._reread)
