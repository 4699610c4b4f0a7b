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
    per `refresh_interval_s`. Settled buckets are read once and then cached, so a refresh costs
    O(endpoints), not O(window length); bucket hashes are read through one `EVAL` returning each hash
    as a single tab-joined string. The view, and which buckets a refresh reads, are `redis_view.py`.
`stats()` = merged Redis view + this replica's deltas not yet confirmed by Redis (nothing double
counted).

The Redis key layout, the Lua scripts and the payload format are in `redis_wire.py`.

When Redis is down: the request path is unaffected; `stats()` shows the last merged view plus every
local sample since (pending deltas keep accumulating, bounded: buckets older than the longest window
are dropped, and at most `max_pending_buckets` are kept, oldest dropped first). The outage is logged
once (and its end once), `redis_errors` counts failed round trips, and the task retries with backoff
(0.1 s doubling to 2 s); pending deltas are flushed once Redis answers again.

Redis Cluster: every key of one store shares the hash tag `{key_prefix}` (`redis_wire.KeyLayout`), so
the scripts, which also touch keys they do not declare, run on the one node that holds them all.

What it does not do: no persistence of local
state across restarts, no clock synchronisation (replica clocks must agree within ~settle_s / 2).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Mapping
from typing import Any

from gateway.background import next_tick
from gateway.redisconn import REDIS_FAILURES, AnyRedis, connect, ensure_connected
from gateway.telemetry.bucket import Bucket
from gateway.telemetry.redis_view import RemoteView
from gateway.telemetry.redis_wire import (
    DEDUP_TTL_S,
    REPLICA_TTL_S,
    WRITE_SCRIPT,
    Batch,
    KeyLayout,
    encode_flush,
    safe_key,
    split_batch,
)
from gateway.telemetry.sample import AttemptSample
from gateway.telemetry.store import DEFAULT_CACHE_TTL_S, DEFAULT_EWMA_ALPHA, Clock, StoreBase
from gateway.telemetry.window import DEFAULT_BUCKET_S, DEFAULT_MAX_WINDOW_S, EndpointWindows

logger = logging.getLogger("ultraroute.telemetry")

BACKOFF_START_S = 0.1
BACKOFF_MAX_S = 2.0
MAX_UNACKED = 8


class _Sent:
    """One flush payload sent (or being sent) but not yet confirmed by Redis."""

    __slots__ = ("batch", "payload", "token")

    def __init__(self, token: str, payload: str, batch: Batch) -> None:
        self.token = token
        self.payload = payload
        self.batch = batch


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
        self.layout = KeyLayout.under(key_prefix)
        self.bucket_ttl_s = int(bucket_ttl_s)
        self.socket_timeout_s = float(socket_timeout_s)
        self.settle_s = float(settle_s) if settle_s is not None else max(2.0, 4 * self.flush_interval_s)
        self.inflight_ttl_s = max(2, math.ceil(3 * self.flush_interval_s))
        self.max_reads_per_refresh = int(max_reads_per_refresh)  # fixed once `_view` is made
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

        self._view = RemoteView(self.layout, replica_id=replica_id, bucket_s=self.bucket_s,
                                max_window_s=self.max_window_s, settle_s=self.settle_s,
                                max_reads=self.max_reads_per_refresh)
        self._pending: Batch = {}  # recorded here, not yet sent
        self._unacked: list[_Sent] = []  # sent, reply not received yet: re-sent with the same token
        self._token_prefix = f"{replica_id}:{uuid.uuid4().hex[:12]}"
        self._seq = 0
        self._view_read = asyncio.Event()  # set once a refresh has read every replica's figures

        self._client: AnyRedis | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._io_lock = asyncio.Lock()  # one flush or refresh at a time (stop() may overlap the task)
        self._healthy = True
        self._outage_started = 0.0
        self._backoff = 0.0

    @property
    def key_prefix(self) -> str:
        return self.layout.prefix

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
        newest = self._view.known.get(key)
        for src in self._sources(key):
            b = src.aggregate(now, w)
            if out is None:
                out = b
            else:
                out.merge(b)
            if src.newest is not None and (newest is None or src.newest > newest):
                newest = src.newest
        return (out if out is not None else Bucket()), newest, w

    def _sources(self, key: str) -> list[EndpointWindows]:
        sources = [self._view.windows.get(key), self._pending.get(key)]
        sources += [sent.batch.get(key) for sent in self._unacked]
        return [s for s in sources if s is not None]

    def _remote_in_flight(self, key: str) -> int:
        return self._view.others_in_flight.get(key, 0)

    def _others_in_flight(self) -> Mapping[str, int]:
        return self._view.others_in_flight

    def _prune(self, now: float) -> None:
        self._view.prune(now)
        self._prune_pending(now)

    def _data_keys(self) -> set[str]:
        keys = self._view.keys() | set(self._pending)
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
            # no hidden retries: we retry ourselves (a flush re-sent by redis-py could double-count)
            self._client = connect(self.url, timeout_s=self.socket_timeout_s, decode_responses=True,
                                   retries=False)
        self._task = asyncio.create_task(self._run(), name=f"telemetry-redis-{self.replica_id}")

    async def view_read(self) -> None:
        """Returns once a refresh has read every replica's figures (waits through an outage: bound it)."""
        await self._view_read.wait()

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
                    next_flush = now + 0.01 if more else next_tick(now, self.flush_interval_s)
                # A refresh due before the next flush runs in this wakeup, right after the flush: one
                # wakeup a round. (Apart -- a start-up backlog's 10 ms steps put them out of step for good
                # -- the two woke the loop four times a second, each wakeup a few hundred µs of CPU.)
                if now >= next_refresh or next_refresh < next_flush:
                    more = await self._refresh()
                    next_refresh = now + 0.01 if more else next_tick(now, self.refresh_interval_s)
                    if not more:
                        self._view_read.set()
                self._on_success()
                delay = max(0.0, min(next_flush, next_refresh) - loop.time())
            except asyncio.CancelledError:
                raise
            except REDIS_FAILURES as exc:
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
    def _prune_pending(self, now: float) -> None:
        for key in list(self._pending):
            w = self._pending[key]
            self.dropped_buckets += w.prune(now)
            if not len(w):
                del self._pending[key]

    def _bound_pending(self, now: float) -> None:
        self._prune_pending(now)
        total = sum(len(w) for w in self._pending.values())
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
        # a backlog after an outage goes out over several round trips
        batch, self._pending = split_batch(self._pending, self.max_commands_per_flush)
        more = bool(self._pending)
        sends = list(self._unacked)
        new: _Sent | None = None
        if batch:
            payload = encode_flush(batch, now, layout=self.layout, bucket_s=self.bucket_s,
                                   bucket_ttl_s=self.bucket_ttl_s, late_after_s=self.settle_s / 2)
            new = _Sent(self._next_token(), payload, batch)
            self._unacked.append(new)
            sends.append(new)
        pipe = client.pipeline(transaction=False)
        for sent in sends:
            pipe.eval(WRITE_SCRIPT, 1, self.layout.flush(sent.token), DEDUP_TTL_S, sent.payload)
        self._queue_upkeep(pipe, now, final)
        try:
            await ensure_connected(client)  # connect first: a failure here means nothing was sent
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
                self._view.merge(sent.batch)  # applied now (n > 0) or before (0)
        for res in results[len(sends):]:
            if isinstance(res, Exception):
                self._log_error(f"flush upkeep rejected by Redis: {res}", exc_info=False)
        self.flushes += 1
        return more

    def _queue_upkeep(self, pipe: Any, now: float, final: bool) -> None:
        """This replica's in-flight counts and its entry in the replica directory."""
        ik = self.layout.inflight(self.replica_id)
        replicas_key = self.layout.replicas
        if final:
            pipe.delete(ik)
            pipe.zrem(replicas_key, self.replica_id)
            return
        counts = {safe_key(k): loc.in_flight for k, loc in self._local.items()}
        if counts:
            pipe.hset(ik, mapping=counts)
            pipe.expire(ik, self.inflight_ttl_s)
        pipe.zadd(replicas_key, {self.replica_id: now})
        pipe.zremrangebyscore(replicas_key, "-inf", now - REPLICA_TTL_S)
        pipe.expire(replicas_key, REPLICA_TTL_S)

    # -- refresh ------------------------------------------------------------------------------------
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
        pipe = client.pipeline(transaction=False)
        round_ = self._view.queue_refresh(pipe, now)
        res = await pipe.execute()
        self.refreshes += 1
        return self._view.apply_refresh(round_, res, now)
