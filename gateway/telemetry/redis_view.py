"""The read side of the shared telemetry store: the merged view of all replicas' data, and which
bucket hashes each refresh reads so that a refresh costs O(endpoints), not O(window length).

What it does: `RemoteView` holds what was last read from Redis (every replica's buckets, the endpoint
and replica directories, the other replicas' in-flight counts) plus this replica's flushes since;
`queue_refresh` puts one refresh's reads on a pipeline and `apply_refresh` takes in the replies.
`ReadPlanner` decides which (endpoint, bucket) hashes a refresh reads: a bucket is re-read while it
can still change (the current bucket and the previous one until `settle_s` after its end); once
settled it is read one last time and then served from the view. Older settled buckets never read (a
new replica, a new endpoint) are read newest first, at most `max_reads` per refresh. Writers that
flush into an already settled bucket (e.g. after an outage) leave a "late" marker (see
`redis_wire.py`); a new marker means one more read of that bucket. A bucket that can still change
but did not since its last read (an endpoint nobody used in the last seconds: most of them, in a
large catalogue) is not parsed again: its reply is kept until it settles, and compared.

What it does not do: no network I/O (`RedisStore` executes the pipeline, times it and handles its
failures), nothing about this replica's unflushed deltas, no wire-format details (`redis_wire.py`).
Relies on replica clocks agreeing within ~settle_s / 2: writers mark a write late from settle_s / 2
after its bucket's end (`encode_flush`), readers stop re-reading a bucket settle_s after its end.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from gateway.telemetry.redis_wire import (
    LATE_KEEP_S,
    READ_SCRIPT,
    REPLICA_TTL_S,
    Batch,
    KeyLayout,
    parse_bucket,
    parse_late_member,
    safe_key,
    sum_in_flight,
)
from gateway.telemetry.window import EndpointWindows

Read = tuple[str, int]  # (endpoint key, bucket index)


class ReadPlanner:
    """The read-once bookkeeping of settled buckets; see the module docstring."""

    def __init__(self, *, bucket_s: float, max_window_s: float, settle_s: float, max_reads: int) -> None:
        self.bucket_s = float(bucket_s)
        self.max_window_s = float(max_window_s)
        self.settle_s = float(settle_s)
        self.max_reads = int(max_reads)
        # endpoint -> (lo, hi): settled buckets lo..hi have had their final read (cached from then on)
        self.cold_done: dict[str, tuple[int, int]] = {}
        self.reread: set[Read] = set()  # settled buckets to read again (late writes)
        self._late_seen: dict[str, float] = {}  # late marker -> its score at the last refresh

    def settled_upto(self, now: float) -> int:
        """Buckets with an index up to this get no on-time write any more."""
        return int((now - self.settle_s) // self.bucket_s) - 1

    def plan(self, now: float, known: Mapping[str, float]) -> tuple[list[Read], bool]:
        """Buckets to read this round, and whether settled buckets were left for the next rounds.

        `known` maps each endpoint in the shared directory to its newest sample time. Order: buckets
        with a late write, buckets that can still change (read every round), buckets that just settled
        (their final read), then older settled buckets never read, newest first, within `max_reads`.
        Buckets after an endpoint's newest sample hold no data and are not read.
        """
        bs = self.bucket_s
        cur = int(now // bs)
        lo = int((now - self.max_window_s) // bs)
        settled_upto = self.settled_upto(now)
        self.reread = {(k, i) for (k, i) in self.reread if lo <= i <= cur and k in known}
        reads: list[Read] = sorted(self.reread)
        backlog: list[tuple[int, str]] = []
        for key, newest in known.items():
            top = min(cur, int(newest // bs))  # buckets after the newest sample hold nothing
            done_lo, done_hi = self.cold_done.get(key, (settled_upto + 1, settled_upto))
            if done_hi < lo - 1 or done_lo > done_hi + 1:  # out of retention (or invalid): start over
                done_lo, done_hi = settled_upto + 1, settled_upto
            if done_hi >= top:  # settled buckets above the newest sample are empty: done
                done_hi = max(done_hi, settled_upto)
            if done_lo > top + 1:
                done_lo = max(lo, top + 1)
            self.cold_done[key] = (done_lo, done_hi)
            for idx in range(max(done_hi + 1, lo), min(settled_upto, top) + 1):
                reads.append((key, idx))  # just settled: its final read
            for idx in range(max(settled_upto + 1, lo), top + 1):
                reads.append((key, idx))  # can still change: read every round
            for idx in range(min(done_lo - 1, top), lo - 1, -1):
                backlog.append((idx, key))  # settled, never read
                if len(backlog) > 4 * self.max_reads:
                    break
        budget = max(0, self.max_reads - len(reads))
        backlog.sort(reverse=True)  # newest settled buckets first
        reads.extend((key, idx) for idx, key in backlog[:budget])
        return reads, len(backlog) > budget

    def note_late(self, late: Iterable[tuple[str, float]]) -> None:
        """The P:late members and scores just read: a marker new or moved since the last call means
        another late write, so its bucket is read again."""
        seen: dict[str, float] = {}
        for member, score in late:
            seen[member] = score
            if self._late_seen.get(member) != score:
                read = parse_late_member(member)
                if read is not None:
                    self.reread.add(read)
        self._late_seen = seen

    def note_read(self, reads: Iterable[Read], now: float) -> None:
        """These buckets were just read: settled ones extend their endpoint's read-once range."""
        settled_upto = self.settled_upto(now)
        for key, idx in reads:
            self.reread.discard((key, idx))
            if idx <= settled_upto:
                done_lo, done_hi = self.cold_done.get(key, (idx, idx - 1))
                if idx == done_hi + 1:
                    done_hi = idx
                if idx == done_lo - 1:
                    done_lo = idx
                self.cold_done[key] = (done_lo, max(done_hi, done_lo - 1))

    def retain(self, known: Mapping[str, float]) -> None:
        """Forget endpoints that left the shared directory."""
        for key in [k for k in self.cold_done if k not in known]:
            del self.cold_done[key]

    @property
    def rereads_pending(self) -> bool:
        return bool(self.reread)


class RefreshRound(NamedTuple):
    """What one refresh asked Redis for, to match the replies against."""

    reads: list[Read]  # bucket hashes read, in READ_SCRIPT's key order
    others: list[str]  # replicas whose in-flight hashes were read, in pipeline order
    more: bool  # settled buckets were left for the next rounds


class RemoteView:
    """All replicas' data as last read from Redis, plus this replica's flushes since."""

    def __init__(self, layout: KeyLayout, *, replica_id: str, bucket_s: float, max_window_s: float,
                 settle_s: float, max_reads: int) -> None:
        self.layout = layout
        self.replica_id = replica_id
        self.bucket_s = float(bucket_s)
        self.max_window_s = float(max_window_s)
        self.windows: dict[str, EndpointWindows] = {}  # merged view read from Redis (+ own flushes)
        self.known: dict[str, float] = {}  # endpoint -> newest sample time, from P:endpoints
        self.replicas: list[str] = []  # live replicas, from P:replicas (this one included)
        self.others_in_flight: dict[str, int] = {}  # endpoint -> in-flight count on the other replicas
        self.planner = ReadPlanner(bucket_s=bucket_s, max_window_s=max_window_s, settle_s=settle_s,
                                   max_reads=max_reads)
        # (endpoint, bucket) -> its last reply, for buckets that can still change (read every round):
        # the same reply again is the same bucket, not parsed again (parsing such replies was ~30% of
        # an idle replica's Python work); a reply is compared as fast as it is read.
        self._replies: dict[Read, str] = {}

    def _windows_of(self, key: str) -> EndpointWindows:
        w = self.windows.get(key)
        if w is None:
            w = self.windows[key] = EndpointWindows(self.bucket_s, self.max_window_s)
        return w

    def keys(self) -> set[str]:
        """Endpoints with data in the view or in the shared directory."""
        return set(self.windows) | set(self.known)

    def merge(self, batch: Batch) -> None:
        """Deltas this replica flushed are now in Redis: keep them in the view until the next read of it."""
        for key, w in batch.items():
            self._windows_of(key).merge_windows(w)
        if self._replies:  # the view's buckets of these endpoints now differ from their last reply
            self._replies = {read: reply for read, reply in self._replies.items() if read[0] not in batch}

    def prune(self, now: float) -> None:
        """Drop buckets too old for any window, and endpoints gone from the shared directory."""
        for key in list(self.windows):
            w = self.windows[key]
            w.prune(now)
            if not len(w) and key not in self.known:
                del self.windows[key]
        self.planner.retain(self.known)
        settled_upto = self.planner.settled_upto(now)
        self._replies = {read: reply for read, reply in self._replies.items()
                         if read[1] > settled_upto and read[0] in self.windows}

    def queue_refresh(self, pipe: Any, now: float) -> RefreshRound:
        """Queue one refresh's reads on `pipe` (a redis-py pipeline the caller executes)."""
        layout = self.layout
        reads, more = self.planner.plan(now, self.known)
        others = [r for r in self.replicas if r != self.replica_id]
        pipe.zrangebyscore(layout.endpoints, now - self.max_window_s - 2 * self.bucket_s, "+inf", withscores=True)
        pipe.zrangebyscore(layout.replicas, now - REPLICA_TTL_S, "+inf")
        pipe.zrangebyscore(layout.late, now - LATE_KEEP_S, "+inf", withscores=True)
        for r in others:
            pipe.hgetall(layout.inflight(r))
        if reads:
            pipe.eval(READ_SCRIPT, len(reads), *(layout.bucket(safe_key(k), i) for k, i in reads))
        return RefreshRound(reads, others, more)

    def apply_refresh(self, round_: RefreshRound, res: list[Any], now: float) -> bool:
        """Take in the replies to `queue_refresh`'s commands. Returns True if another refresh should
        follow soon (buckets left to read, new endpoints or replicas, late writes to read again)."""
        endpoints: list[tuple[str, float]] = res[0]
        replicas: list[str] = res[1]
        known = {k: float(s) for k, s in endpoints}
        new_keys = any(k not in self.known for k in known)
        self.known = known
        for k, s in known.items():
            w = self.windows.get(k)
            if w is not None:
                w.note_newest(s)
        new_replicas = bool(set(replicas) - set(self.replicas))
        self.replicas = replicas
        self.planner.note_late(res[2])
        n_others = len(round_.others)
        self.others_in_flight = sum_in_flight(res[3: 3 + n_others])
        replies: list[str] = res[3 + n_others] if round_.reads else []
        settled_upto = self.planner.settled_upto(now)
        cache = self._replies
        for read, reply in zip(round_.reads, replies, strict=True):
            if read[1] > settled_upto:
                if cache.get(read) == reply:
                    continue  # unchanged since the last read: the view holds it already
                cache[read] = reply
            elif cache:
                cache.pop(read, None)  # its final read: not read again unless written late
            self._windows_of(read[0]).set_bucket(read[1], parse_bucket(reply))
        self.planner.note_read(round_.reads, now)
        return round_.more or new_keys or new_replicas or self.planner.rereads_pending
