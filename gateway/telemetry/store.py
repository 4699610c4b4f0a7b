"""The telemetry store interface, the shared request-path bookkeeping, and the in-memory store.

What it does: `TelemetryStore` is the interface routing and dispatch code depend on. `StoreBase`
implements the synchronous request-path part every store shares: local in-flight counters
(`begin`/`end`), fast per-endpoint EWMAs of TTFT and decode speed, and a short-lived cache of
`EndpointStats` per (endpoint, window) so `stats()` is a dict lookup on the hot path (refreshed
between requests, once past half its TTL: see `stats`). `MemoryStore`
keeps the rolling windows in this process only (the default when no Redis is configured).

What it does not do: no network I/O here (see `redis_store.py`); `record`/`begin`/`end`/`stats` never
block and never raise into the caller (internal errors are logged, rate-limited). Not thread-safe:
call it from the event loop thread.
"""

from __future__ import annotations

import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol, runtime_checkable

from gateway.background import RefreshAhead
from gateway.telemetry.bucket import Bucket
from gateway.telemetry.sample import AttemptSample, Outcome
from gateway.telemetry.stats import EndpointStats
from gateway.telemetry.window import DEFAULT_BUCKET_S, DEFAULT_MAX_WINDOW_S, EndpointWindows, summarize

logger = logging.getLogger("ultraroute.telemetry")

Clock = Callable[[], float]

DEFAULT_CACHE_TTL_S = 0.25
DEFAULT_EWMA_ALPHA = 0.3
# An EWMA move larger than this fraction updates the EWMAs in the endpoint's cached stats at once, so
# a sudden slow-down is visible to the next stats() call instead of after the cache TTL. Only the
# EWMAs: recomputing the windows' figures costs a few hundred µs, and on a jittery endpoint such moves
# came every few requests, while those figures barely move within the TTL.
EWMA_INVALIDATE_FRACTION = 0.25


@runtime_checkable
class TelemetryStore(Protocol):
    """What the gateway needs from telemetry. All sync methods are O(1)-ish and never do I/O."""

    bucket_s: float  # the resolution of the windows (and of `series`)

    def record(self, sample: AttemptSample) -> None: ...

    def begin(self, endpoint_key: str) -> int: ...

    def end(self, endpoint_key: str) -> None: ...

    def in_flight(self, endpoint_key: str) -> int: ...

    def busy_s(self, endpoint_key: str) -> float: ...

    def in_flight_of(self, endpoint_keys: Sequence[str]) -> list[int]: ...

    def stats(self, endpoint_key: str, window_s: float = 300, fresh: bool = False) -> EndpointStats: ...

    def keys(self) -> list[str]: ...

    def series(self, endpoint_key: str, window_s: float = 1800) -> list[tuple[float, Bucket]]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def view_read(self) -> None: ...


class Ewma:
    """Exponentially weighted moving average; the first value seeds it."""

    __slots__ = ("alpha", "value")

    def __init__(self, alpha: float = DEFAULT_EWMA_ALPHA) -> None:
        self.alpha = alpha
        self.value: float | None = None

    def update(self, x: float) -> float:
        v = self.value
        self.value = x if v is None else v + self.alpha * (x - v)
        return self.value


class _Local:
    """Per-endpoint state that never leaves this replica."""

    __slots__ = ("busy", "busy_at", "ewma_tps", "ewma_ttft", "in_flight")

    def __init__(self, alpha: float) -> None:
        self.in_flight = 0
        # The in-flight count integrated over time (perf_counter s), up to `busy_at`: an attempt's mean
        # load is its difference over the attempt (`busy_s`).
        self.busy = 0.0
        self.busy_at = time.perf_counter()
        self.ewma_ttft = Ewma(alpha)
        self.ewma_tps = Ewma(alpha)


class _ErrorLog:
    """Logs internal errors at most once per `every_s` (a request path must not flood the log)."""

    def __init__(self, every_s: float = 60.0) -> None:
        self.every_s = every_s
        self._next = 0.0

    def __call__(self, what: str, *, exc_info: bool = True) -> None:
        now = time.monotonic()
        if now >= self._next:
            self._next = now + self.every_s
            logger.error("telemetry: internal error in %s (further ones muted for %.0fs)", what,
                         self.every_s, exc_info=exc_info)


class StoreBase(ABC):
    """In-flight counters, EWMAs and the stats cache; subclasses provide the window data."""

    def __init__(self, *, clock: Clock = time.time, bucket_s: float = DEFAULT_BUCKET_S,
                 max_window_s: float = DEFAULT_MAX_WINDOW_S, cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
                 ewma_alpha: float = DEFAULT_EWMA_ALPHA) -> None:
        self.clock = clock
        self.bucket_s = float(bucket_s)
        self.max_window_s = float(max_window_s)
        self.cache_ttl_s = float(cache_ttl_s)
        self.ewma_alpha = float(ewma_alpha)
        self._local: dict[str, _Local] = {}
        self._cache: dict[str, dict[float, tuple[float, EndpointStats]]] = {}
        self._ewma_moved: set[str] = set()  # endpoints whose cached stats show EWMAs that jumped since
        self._ahead = RefreshAhead()  # (endpoint, window) views rebuilt before they expire
        self._next_sweep = 0.0
        self._log_error = _ErrorLog()

    # -- request path -----------------------------------------------------------------------------
    def record(self, sample: AttemptSample) -> None:
        """File one attempt. Synchronous, no I/O, never raises."""
        try:
            key = sample.endpoint_key
            loc = self._local.get(key)
            if loc is None:
                loc = self._local[key] = _Local(self.ewma_alpha)
            self._observe_ewma(key, loc, sample)
            t = sample.started_at + sample.e2e_s
            self._add(key, sample, t)
            now = self.clock()
            if now >= self._next_sweep:
                self._sweep(now)
        except Exception:
            self._log_error("record")

    def _observe_ewma(self, key: str, loc: _Local, s: AttemptSample) -> None:
        jump = False
        if s.ttft_s is not None:
            jump = self._update(loc.ewma_ttft, s.ttft_s * 1000.0)
        elif s.outcome == Outcome.TIMEOUT:
            # Timed out before any token: the TTFT was at least e2e. Only ever raises the EWMA.
            floor_ms = s.e2e_s * 1000.0
            cur = loc.ewma_ttft.value
            if cur is None or floor_ms > cur:
                jump = self._update(loc.ewma_ttft, floor_ms)
        if s.decode_tps is not None:
            jump = self._update(loc.ewma_tps, s.decode_tps) or jump
        if jump and key in self._cache:
            self._ewma_moved.add(key)

    @staticmethod
    def _update(e: Ewma, x: float) -> bool:
        if not math.isfinite(x):
            return False
        old = e.value
        new = e.update(x)
        return old is not None and abs(new - old) > EWMA_INVALIDATE_FRACTION * abs(old)

    def begin(self, endpoint_key: str) -> int:
        """An attempt starts: returns the in-flight count (all replicas) before it."""
        loc = self._local.get(endpoint_key)
        if loc is None:
            loc = self._local[endpoint_key] = _Local(self.ewma_alpha)
        before = loc.in_flight + self._remote_in_flight(endpoint_key)
        now = time.perf_counter()
        loc.busy += before * (now - loc.busy_at)
        loc.busy_at = now
        loc.in_flight += 1
        return before

    def end(self, endpoint_key: str) -> None:
        loc = self._local.get(endpoint_key)
        if loc is not None and loc.in_flight > 0:
            now = time.perf_counter()
            loc.busy += (loc.in_flight + self._remote_in_flight(endpoint_key)) * (now - loc.busy_at)
            loc.busy_at = now
            loc.in_flight -= 1

    def busy_s(self, endpoint_key: str) -> float:
        """In-flight requests (all replicas: the others' as last read) integrated over time up to now,
        in request-seconds (perf_counter): what an attempt ran beside is its difference over the attempt
        divided by the attempt's time. The counts at its start and end alone said far less than
        that when many start at once: each saw few at start, and ran beside many (AttemptSample.load)."""
        loc = self._local.get(endpoint_key)
        if loc is None:
            return 0.0
        return loc.busy + (loc.in_flight + self._remote_in_flight(endpoint_key)) * (time.perf_counter() - loc.busy_at)

    def in_flight(self, endpoint_key: str) -> int:
        """Live in-flight count: this replica's exact count plus other replicas' last known counts."""
        loc = self._local.get(endpoint_key)
        return (loc.in_flight if loc is not None else 0) + self._remote_in_flight(endpoint_key)

    def in_flight_of(self, endpoint_keys: Sequence[str]) -> list[int]:
        """`in_flight` of each key, read at once: the live choice reads 4-8 per request, and two Python
        calls per key cost more than its scoring."""
        local, others = self._local, self._others_in_flight()
        counts = []
        for k in endpoint_keys:  # (a loop: a comprehension's own frame costs more than its 4-8 items)
            loc = local.get(k)
            counts.append((0 if loc is None else loc.in_flight) + others.get(k, 0))
        return counts

    def stats(self, endpoint_key: str, window_s: float = 300, fresh: bool = False) -> EndpointStats:
        """Stats of the last `window_s` seconds, recomputed at most every `cache_ttl_s`; with `fresh`,
        now (for a decision on a failure path, which must count the attempts just recorded: a view
        250 ms old misses two or three of a fast endpoint's). Never raises.

        A view asked for past half its TTL is recomputed by a timer just before it expires
        (`RefreshAhead`), not by the request that would find it expired: recomputing costs a few
        hundred µs, and that request paid them before its upstream was even called -- at 20 requests/s,
        1 request in 5 (a paced stream's time to first token, issue 32 item 11). The timer runs between
        requests' steps, off any one request's path to its first token. No view older than the TTL is
        served, as before; one nobody asks for is not kept fresh."""
        now = self.clock()
        w = float(window_s)
        per_key = self._cache.get(endpoint_key)
        if per_key is not None and not fresh:
            if endpoint_key in self._ewma_moved:
                self._ewma_moved.discard(endpoint_key)
                self._refresh_ewmas(endpoint_key, per_key)
            hit = per_key.get(w)
            if hit is not None and 0.0 <= now - hit[0] < self.cache_ttl_s:
                if now - hit[0] >= self.cache_ttl_s / 2:
                    self._ahead.schedule((endpoint_key, w), hit[0] + self.cache_ttl_s * 0.9 - now,
                                         self._rebuild_view, endpoint_key, w)
                return hit[1]
        try:
            if now >= self._next_sweep:
                self._sweep(now)
            st = self._compute(endpoint_key, now, w)
        except Exception:
            self._log_error("stats")
            return EndpointStats(window_s=w)
        self._cache.setdefault(endpoint_key, {})[w] = (now, st)
        return st

    def _rebuild_view(self, key: str, window_s: float) -> None:
        # Not `_refresh`: RedisStore's `_refresh()` is its Redis read, and a subclass's name would win.
        try:
            now = self.clock()
            if now >= self._next_sweep:
                self._sweep(now)
            st = self._compute(key, now, window_s)
        except Exception:
            self._log_error("stats")
            return
        self._cache.setdefault(key, {})[window_s] = (now, st)

    def _refresh_ewmas(self, key: str, per_key: dict[float, tuple[float, EndpointStats]]) -> None:
        loc = self._local.get(key)
        if loc is None:
            return
        ttft, tps = loc.ewma_ttft.value, loc.ewma_tps.value
        for window, (at, st) in per_key.items():
            per_key[window] = (at, replace(st, ewma_ttft_ms=ttft, ewma_decode_tps=tps))

    def _compute(self, key: str, now: float, window_s: float) -> EndpointStats:
        bucket, newest, w = self._aggregate(key, now, window_s)
        loc = self._local.get(key)
        return summarize(
            bucket, window_s=w, now=now, newest=newest,
            in_flight=(loc.in_flight if loc is not None else 0) + self._remote_in_flight(key),
            ewma_ttft_ms=loc.ewma_ttft.value if loc is not None else None,
            ewma_decode_tps=loc.ewma_tps.value if loc is not None else None,
        )

    def keys(self) -> list[str]:
        return sorted(self._known_keys())

    def series(self, endpoint_key: str, window_s: float = 1800) -> list[tuple[float, Bucket]]:
        """One endpoint's buckets over the last `window_s`, oldest first: (bucket start, its data).
        For history views (not the request path): it thaws and merges every bucket it returns."""
        now = self.clock()
        first = int((now - self._clamp(window_s)) // self.bucket_s)
        merged: dict[int, Bucket] = {}
        for windows in self._sources(endpoint_key):
            for idx, bucket in windows.items():
                if idx >= first:
                    if idx in merged:
                        merged[idx].merge(bucket)
                    else:
                        merged[idx] = bucket.copy()
        return [(idx * self.bucket_s, merged[idx]) for idx in sorted(merged)]

    # -- maintenance ----------------------------------------------------------------------------
    def _sweep(self, now: float) -> None:
        """Once per bucket: drop old buckets and idle endpoints, empty the stats cache."""
        self._next_sweep = now + self.bucket_s
        self._cache.clear()
        self._ewma_moved.clear()
        self._prune(now)
        live = self._data_keys()
        for key in [k for k, loc in self._local.items() if loc.in_flight == 0 and k not in live]:
            del self._local[key]

    def _clamp(self, window_s: float) -> float:
        return min(max(float(window_s), self.bucket_s), self.max_window_s)

    def _new_windows(self) -> EndpointWindows:
        return EndpointWindows(self.bucket_s, self.max_window_s)

    # -- for subclasses -------------------------------------------------------------------------
    @abstractmethod
    def _add(self, key: str, sample: AttemptSample, t: float) -> None: ...

    @abstractmethod
    def _aggregate(self, key: str, now: float, window_s: float) -> tuple[Bucket, float | None, float]:
        """(merged bucket for the window, newest sample time, effective window_s)."""

    @abstractmethod
    def _prune(self, now: float) -> None: ...

    @abstractmethod
    def _data_keys(self) -> set[str]:
        """Endpoints that still have window data."""

    @abstractmethod
    def _sources(self, key: str) -> list[EndpointWindows]:
        """Every set of windows holding data of this endpoint (merged by `series`)."""

    def _known_keys(self) -> set[str]:
        return self._data_keys() | set(self._local)

    def _remote_in_flight(self, key: str) -> int:
        return 0

    def _others_in_flight(self) -> Mapping[str, int]:
        """In flight on the other replicas, by endpoint key, as last read."""
        return {}  # (none here; a new empty dict is cheaper to read than a shared read-only one)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None

    async def view_read(self) -> None:
        """Returns once the figures of every replica have been read (here: at once, there are no others)."""
        return None


class MemoryStore(StoreBase):
    """Rolling windows in this process only: nothing is shared with other replicas."""

    def __init__(self, *, clock: Clock = time.time, bucket_s: float = DEFAULT_BUCKET_S,
                 max_window_s: float = DEFAULT_MAX_WINDOW_S, cache_ttl_s: float = DEFAULT_CACHE_TTL_S,
                 ewma_alpha: float = DEFAULT_EWMA_ALPHA) -> None:
        super().__init__(clock=clock, bucket_s=bucket_s, max_window_s=max_window_s, cache_ttl_s=cache_ttl_s,
                         ewma_alpha=ewma_alpha)
        self._windows: dict[str, EndpointWindows] = {}

    def _add(self, key: str, sample: AttemptSample, t: float) -> None:
        w = self._windows.get(key)
        if w is None:
            w = self._windows[key] = self._new_windows()
        w.add(sample, t)

    def _aggregate(self, key: str, now: float, window_s: float) -> tuple[Bucket, float | None, float]:
        w = self._windows.get(key)
        if w is None:
            return Bucket(), None, self._clamp(window_s)
        return w.aggregate(now, window_s), w.newest, w.clamp_window(window_s)

    def _prune(self, now: float) -> None:
        for key in list(self._windows):
            w = self._windows[key]
            w.prune(now)
            if not len(w):
                del self._windows[key]

    def _data_keys(self) -> set[str]:
        return set(self._windows)

    def _sources(self, key: str) -> list[EndpointWindows]:
        w = self._windows.get(key)
        return [] if w is None else [w]

    def windows(self, endpoint_key: str) -> EndpointWindows | None:
        """The raw windows of one endpoint (for tests and diagnostics)."""
        return self._windows.get(endpoint_key)
