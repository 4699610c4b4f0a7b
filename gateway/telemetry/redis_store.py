"""A telemetry store shared by all gateway replicas through Redis, without Redis on the request path.

What it does: `record()`/`begin()`/`end()`/`stats()` work on local memory only (see `StoreBase`). One
background task per store
  * flushes this replica's pending deltas (buckets of samples recorded since the last flush) with one
    pipelined round trip per `flush_interval_s`: HINCRBY/HINCRBYFLOAT into shared per-endpoint,
    per-time-bucket hashes (every key gets a TTL), the endpoint directory, plus this replica's
    in-flight counts and the replica directory. The hash updates of one flush travel as ONE `EVAL`
    (a tiny Lua loop running the HINCRBYs server-side): atomic, cheap for Python (redis-py costs
    ~20 us per pipelined command on a small machine, ~0.3 us per line here), and idempotent through a
    per-flush token, so a flush whose reply was lost is re-sent safely (exactly once);
  * refreshes the merged view (all replicas' data, this one's included) with one pipelined round trip
    per `refresh_interval_s`. A bucket is re-read while it can still change (the current bucket and
    the previous one until `settle_s` after its end); once settled it is read one last time and then
    cached, so a refresh costs O(endpoints), not O(window length). Bucket hashes are read through one
    `EVAL` returning each hash as a single tab-joined string (parsed with str.split). Writers that
    flush into an already settled bucket (e.g. after an outage) leave a "late" marker so readers
    re-read that bucket.
`stats()` = merged Redis view + this replica's deltas not yet confirmed by Redis (nothing double
counted).

Redis key layout (prefix `P`, default "ur:tel"):
  P:b:<endpoint_key>:<bucket>  hash   additive fields, see `Bucket.to_fields`; TTL: bucket end + bucket_ttl_s
  P:endpoints                  zset   endpoint_key -> newest sample time (ZADD GT); TTL bucket_ttl_s
  P:inflight:<replica_id>      hash   endpoint_key -> in-flight count on that replica; TTL ~3 flushes
  P:replicas                   zset   replica_id -> last flush time; TTL 60 s
  P:late                       zset   "<endpoint_key>|<bucket>" -> time of a late write; TTL 240 s
  P:flush:<token>              string dedup marker of one applied flush; TTL 900 s
(Endpoint keys must not contain tab or newline: those are replaced by "_" in Redis names.)

When Redis is down: the request path is unaffected; `stats()` shows the last merged view plus every
local sample since (pending deltas keep accumulating, bounded: buckets older than the longest window
are dropped, and at most `max_pending_buckets` are kept, oldest dropped first). The outage is logged
once (and its end once), `redis_errors` counts failed round trips, and the task retries with backoff
(0.1 s doubling to 2 s); pending deltas are flushed once Redis answers again.

What it does not do: no Redis Cluster support (scripts touch undeclared keys), no persistence of local
state across restarts, no clock synchronisation (replica clocks must agree within ~settle_s / 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
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

DEDUP_TTL_S = 900
MAX_UNACKED = 8

Batch = dict[str, EndpointWindows]

# ARGV[1] = dedup key ("" for none), ARGV[2] = its TTL, ARGV[3] = commands, one per line, arguments
# separated by tabs. Returns the number of commands run, or 0 if this flush was applied before.
WRITE_SCRIPT = """
if ARGV[1] ~= '' and not redis.call('SET', ARGV[1], '1', 'NX', 'EX', ARGV[2]) then return 0 end
local n = 0
for line in string.gmatch(ARGV[3], '[^\\n]+') do
  local args = {}
  for a in string.gmatch(line, '[^\\t]+') do args[#args + 1] = a end
  redis.call(unpack(args))
  n = n + 1
end
return n
"""

# KEYS = hashes; returns, per hash, its fields and values joined by tabs ("" when missing).
READ_SCRIPT = """
local out = {}
for i, k in ipairs(KEYS) do out[i] = table.concat(redis.call('HGETALL', k), '\\t') end
return out
"""


def _safe(key: str) -> str:
    """An endpoint key usable inside the tab/newline separated flush payload."""
    return key.replace("\t", "_").replace("\n", "_") if ("\t" in key or "\n" in key) else key


class _Sent:
    """One flush payload sent (or being sent) but not yet confirmed by Redis."""

    __slots__ = ("batch", "payload", "token")

    def __init__(self, token: str, payload: str, batch: Batch) -> None:
        self.token = token
        self.payload = payload
        self.batch = batch


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
        self.settle_s = float(settle_s) if settle_s is not None else max(2.0, 4 * self.flush_interval_s)
        self.inflight_ttl_s = max(2, math.ceil(3 * self.flush_interval_s))
        self.max_reads_per_refresh = int(max_reads_per_refresh)
        self.max_pending_buckets = int(max_pending_buckets)
        self.max_commands_per_flush = int(max_commands_per_flush)

        # Counters for a metrics exporter.
        self.redis_errors = 0  # failed round trips (flush or refresh)
        self.flushes = 0  # successful flush round trips
        self.refreshes = 0  # successful refresh round trips
        self.dropped_buckets = 0  # pending buckets dropped to stay bounded during an outage
        self.flush_errors = 0  # flushes Redis rejected (a bug, logged): their deltas are dropped
        self.flush_seconds = 0.0  # wall time spent in flush round trips (incl. encoding), total
        self.refresh_seconds = 0.0  # wall time spent in refresh round trips (incl. parsing), total

        self._remote: dict[str, EndpointWindows] = {}  # merged view read from Redis (+ own flushes)
        self._pending: Batch = {}  # recorded here, not yet sent
        self._unacked: list[_Sent] = []  # sent, reply not received yet: re-sent with the same token
        self._token_prefix = f"{replica_id}:{uuid.uuid4().hex[:12]}"
        self._seq = 0
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
        self._io_lock = asyncio.Lock()  # one flush or refresh at a time (stop() may overlap the task)
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
        sources = [self._remote.get(key), self._pending.get(key)]
        sources += [sent.batch.get(key) for sent in self._unacked]
        for src in sources:
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
            if not len(w) and key not in self._known:
                del self._remote[key]
                self._cold_done.pop(key, None)
        for key in list(self._pending):
            w = self._pending[key]
            self.dropped_buckets += w.prune(now)
            if not len(w):
                del self._pending[key]
        for key in [k for k in self._cold_done if k not in self._known]:
            del self._cold_done[key]

    def _data_keys(self) -> set[str]:
        keys = set(self._remote) | set(self._pending) | set(self._known)
        for sent in self._unacked:
            keys |= set(sent.batch)
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
            if not len(w):
                del self._pending[key]
            total += len(w)
        if total > self.max_pending_buckets:
            order = sorted((idx, key) for key, w in self._pending.items() for idx in w.indices())
            for idx, key in order[: total - self.max_pending_buckets]:
                w = self._pending[key]
                w.set_bucket(idx, None)
                self.dropped_buckets += 1
                if not len(w):
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
            for idx, b in w.items():
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
            b = src.pop_bucket(idx)
            if b is not None:
                dst.set_bucket(idx, b)
        rest = {k: w for k, w in pending.items() if len(w)}
        return batch, rest

    def _next_token(self) -> str:
        self._seq += 1
        return f"{self._token_prefix}:{self._seq}"

    async def _flush(self, final: bool = False) -> bool:
        t0 = time.perf_counter()
        try:
            async with self._io_lock:
                return await self._flush_locked(final)
        finally:
            self.flush_seconds += time.perf_counter() - t0

    async def _flush_locked(self, final: bool) -> bool:
        """Send pending deltas (one round trip). Returns True if some are left for another one.

        Payloads sent earlier without a reply go first, unchanged and with their token, so Redis
        applies each exactly once. If no connection can be made nothing was sent, and the new batch
        simply returns to the pending deltas.
        """
        client = self._client
        if client is None:
            return False
        now = self.clock()
        self._bound_pending(now)
        while len(self._unacked) >= MAX_UNACKED:  # only after many flushes in a row lost their reply
            dropped = self._unacked.pop(0)
            self.dropped_buckets += sum(len(w) for w in dropped.batch.values())
        batch, self._pending = self._take_batch()
        more = bool(self._pending)
        sends = list(self._unacked)
        new: _Sent | None = None
        if batch:
            new = _Sent(self._next_token(), self._encode(batch, now), batch)
            self._unacked.append(new)
            sends.append(new)
        pipe = client.pipeline(transaction=False)
        for sent in sends:
            pipe.eval(WRITE_SCRIPT, 0, f"{self.key_prefix}:flush:{sent.token}", DEDUP_TTL_S, sent.payload)
        self._queue_upkeep(pipe, now, final)
        try:
            pool = client.connection_pool
            conn = await pool.get_connection()  # connect first: a failure here means nothing was sent
            await pool.release(conn)
        except BaseException:
            if new is not None:
                self._unacked.remove(new)
                self._requeue(new.batch)
            raise
        results = await pipe.execute(raise_on_error=False)  # on failure: `sends` stay unacked
        for sent, res in zip(sends, results, strict=False):
            self._unacked.remove(sent)
            if isinstance(res, Exception):  # Redis rejected the script: a bug, not an outage
                self.flush_errors += 1
                self._log_error(f"flush rejected by Redis: {res}", exc_info=False)
            else:
                self._apply_to_view(sent.batch)  # applied now (n > 0) or before (0)
        for res in results[len(sends):]:
            if isinstance(res, Exception):
                self._log_error(f"flush upkeep rejected by Redis: {res}", exc_info=False)
        self.flushes += 1
        return more

    def _encode(self, batch: Batch, now: float) -> str:
        """The flush payload: one Redis command per line, arguments separated by tabs."""
        bs = self.bucket_s
        late_after = self.settle_s / 2
        prefix = self.key_prefix
        endpoints_key = self.endpoints_key
        late_key = self.late_key
        lines: list[str] = []
        add = lines.append
        any_late = False
        for key, w in batch.items():
            k = _safe(key)
            for idx, b in w.items():
                end = (idx + 1) * bs
                ttl = int(end + self.bucket_ttl_s - now)
                if ttl <= 0:
                    continue
                rk = f"{prefix}:b:{k}:{idx}"
                for f, v in b.to_fields().items():
                    if type(v) is int:
                        add(f"HINCRBY\t{rk}\t{f}\t{v}")
                    else:
                        add(f"HINCRBYFLOAT\t{rk}\t{f}\t{v!r}")
                add(f"EXPIRE\t{rk}\t{ttl}")
                if now >= end + late_after:
                    add(f"ZADD\t{late_key}\t{now!r}\t{k}|{idx}")
                    any_late = True
            if w.newest is not None:
                add(f"ZADD\t{endpoints_key}\tGT\t{w.newest!r}\t{k}")
        if lines:
            add(f"ZREMRANGEBYSCORE\t{endpoints_key}\t-inf\t{now - self.bucket_ttl_s!r}")
            add(f"EXPIRE\t{endpoints_key}\t{self.bucket_ttl_s}")
        if any_late:
            add(f"ZREMRANGEBYSCORE\t{late_key}\t-inf\t{now - LATE_KEEP_S!r}")
            add(f"EXPIRE\t{late_key}\t{int(2 * LATE_KEEP_S)}")
        return "\n".join(lines)

    def _queue_upkeep(self, pipe: Any, now: float, final: bool) -> None:
        """This replica's in-flight counts and its entry in the replica directory."""
        ik = self.inflight_key(self.replica_id)
        if final:
            pipe.delete(ik)
            pipe.zrem(self.replicas_key, self.replica_id)
            return
        counts = {_safe(k): loc.in_flight for k, loc in self._local.items()}
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
        t0 = time.perf_counter()
        try:
            async with self._io_lock:
                return await self._refresh_locked()
        finally:
            self.refresh_seconds += time.perf_counter() - t0

    async def _refresh_locked(self) -> bool:
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
        if reads:
            pipe.eval(READ_SCRIPT, len(reads), *(self.bucket_key(_safe(k), i) for k, i in reads))
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
        flat: list[str] = res[off] if reads else []
        for (key, idx), h in zip(reads, flat, strict=True):
            view = self._remote.get(key)
            if view is None:
                view = self._remote[key] = self._new_windows()
            if h:
                parts = iter(h.split("\t"))
                view.set_bucket(idx, Bucket.from_fields(dict(zip(parts, parts, strict=False))))
            else:
                view.set_bucket(idx, None)
            self._reread.discard((key, idx))
            if idx <= settled_upto:
                done_lo, done_hi = self._cold_done.get(key, (idx, idx - 1))
                if idx == done_hi + 1:
                    done_hi = idx
                if idx == done_lo - 1:
                    done_lo = idx
                self._cold_done[key] = (done_lo, max(done_hi, done_lo - 1))
        return more or new_keys or new_replicas or bool(self._reread)
