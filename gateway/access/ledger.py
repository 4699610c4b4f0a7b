"""Per-key usage: requests and tokens per minute, and spend per budget period, shared by replicas.

Counting and reading happen in memory, so admitting a request costs no I/O. With Redis, a background
task (every `sync_s`) adds this replica's new counts to shared counters (expiring) and reads back the
totals of every replica, for the keys any replica used in the last two minutes and the spend of every
key with a budget. A limit is then enforced across replicas within one sync interval: replicas may
together overshoot by what they admit in that time. Without Redis (or while it is down) the counts
are this replica's alone, and are kept in memory until Redis answers. Without Redis, spend is also
written to `spend_file` (when it changed, at most every `sync_s`) so that a budget outlives a
restart; a single replica is assumed then.

Rate limits count over a true sliding minute (sliding.py): one-second buckets over the last 60 s, so
one replica admits at most N in any 60-second window. In Redis the buckets are the fields of one
hash per key, kind and minute (`<prefix>:use:reqs:<key>:<minute>`, field: the second), read back
whole at each sync.

Crash bound: what a worker counts or charges reaches Redis (or `spend_file`) at its next sync, so a
worker killed outright (SIGKILL) loses at most the last `sync_s` of its counts and spend.

This module counts; `gate.py` decides what the counts allow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from gateway.access.keys import ApiKey, Period, period_id
from gateway.access.ledger_wire import SYNC_SCRIPT, lines, read_rates
from gateway.access.sliding import SLOTS, SlidingMinute
from gateway.background import Outage, cancel_and_wait, sleep_to_tick
from gateway.redisconn import REDIS_FAILURES, connect, hash_tag

log = logging.getLogger("ultraroute.access")

ACTIVE_S = 120  # a key used this recently, on any replica, has its minute counters read back
_RATE_TTL_S = 180
_SPEND_TTL_S: dict[Period, int] = {"day": 3 * 86_400, "month": 40 * 86_400}


@dataclass(frozen=True, slots=True)
class Window:
    """A key's count over the last 60 s at `now` (`estimate`), and how long until it falls to a target."""

    counts: SlidingMinute | None
    now: float
    estimate: float

    def seconds_until(self, target: float) -> float:
        return 0.0 if self.counts is None else self.counts.seconds_until(target, self.now)


class Ledger:
    def __init__(self, redis_url: str | None, prefix: str, sync_s: float = 0.25,
                 budgeted: Callable[[], Iterable[ApiKey]] = tuple, spend_file: Path | None = None) -> None:
        self.prefix = hash_tag(f"{prefix}:use")  # one slot on a Redis Cluster: MGET reads them all at once
        self._legacy_prefix = f"{prefix}:use"  # the names before hash tags: spend found there is adopted
        self._adopted: set[str] = set()  # spend names already looked up under the legacy prefix
        self.sync_s = sync_s
        self.budgeted = budgeted  # the keys whose spend is read back at every sync
        self.outage = Outage(log, "usage sharing", "limits are enforced per replica")
        self._redis = connect(redis_url, timeout_s=0.5) if redis_url else None
        self._shared: dict[str, float] = {}  # every replica's spend as last read (all there is without Redis)
        self._pending: dict[str, float] = {}  # this replica's spend not yet added to Redis
        self._ttl: dict[str, int] = {}
        # (kind, key id) -> its last 60 s: every replica's as last read, plus this one's since.
        self._counts: dict[tuple[str, str], SlidingMinute] = {}
        self._rate_pending: dict[tuple[str, str], dict[int, float]] = {}  # -> {second: amount} not yet in Redis
        self._recent: dict[str, float] = {}  # key id -> when this replica last counted it
        self._task: asyncio.Task[None] | None = None
        self.spend_file = spend_file if redis_url is None else None
        self._spend_changed = False
        self._spend_names: dict[str, tuple[int, Period, str]] = {}  # key id -> (hour, period, spend name)

    # -- names ---------------------------------------------------------------------------------
    def _rate_name(self, kind: str, key_id: str, minute: int) -> str:
        # "reqs"/"toks": hashes of one-second buckets (the per-minute counters before were "req"/"tok").
        return f"{self.prefix}:{kind}s:{key_id}:{minute}"

    def _spend_name(self, key: ApiKey, now: float) -> str:
        # Asked twice a request (admit, charge): the name is the same for the whole hour, so it is
        # kept per key with the hour and period it was made for (one entry per key).
        hour = int(now // 3600)
        made = self._spend_names.get(key.id)
        if made is not None and made[0] == hour and made[1] == key.budget_period:
            return made[2]
        name = f"{self.prefix}:usd:{key.id}:{period_id(key.budget_period, now)}"
        self._spend_names[key.id] = (hour, key.budget_period, name)
        return name

    # -- the hot path: memory only -----------------------------------------------------------
    def _value(self, name: str) -> float:
        return self._shared.get(name, 0.0) + self._pending.get(name, 0.0)

    def _add(self, name: str, amount: float, ttl: int) -> None:
        if self._redis is None:
            self._shared[name] = self._shared.get(name, 0.0) + amount
        else:
            self._pending[name] = self._pending.get(name, 0.0) + amount
            self._ttl[name] = ttl

    def window(self, kind: str, key_id: str, now: float) -> Window:
        """`kind`: "req" or "tok"."""
        counts = self._counts.get((kind, key_id))
        return Window(counts, now, 0.0 if counts is None else counts.count(now))

    def estimate(self, kind: str, key_id: str, now: float) -> float:
        """`window(kind, key_id, now).estimate`, without the Window: what admitting a request reads."""
        counts = self._counts.get((kind, key_id))
        return 0.0 if counts is None else counts.count(now)

    def spend(self, key: ApiKey, now: float) -> float:
        return self._value(self._spend_name(key, now))

    def count(self, key_id: str, now: float, requests: int = 0, tokens: int = 0) -> None:
        if requests:
            self._count(("req", key_id), now, requests)
        if tokens:
            self._count(("tok", key_id), now, tokens)
        self._recent[key_id] = now

    def _count(self, rate: tuple[str, str], now: float, amount: int) -> None:
        counts = self._counts.get(rate)
        if counts is None:
            counts = self._counts[rate] = SlidingMinute()
        counts.add(now, amount)
        if self._redis is not None:
            pending = self._rate_pending.get(rate)
            if pending is None:
                pending = self._rate_pending[rate] = {}
            second = int(now)
            pending[second] = pending.get(second, 0.0) + amount

    def charge(self, key: ApiKey, usd: float, now: float) -> None:
        if usd > 0 and math.isfinite(usd):
            self._add(self._spend_name(key, now), usd, _SPEND_TTL_S[key.budget_period])
            self._spend_changed = True

    # -- the background task -----------------------------------------------------------------
    async def start(self) -> None:
        await self.load_spend_file()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self._save_spend_file()
        if self._redis is not None:
            with contextlib.suppress(*REDIS_FAILURES):
                await self.sync()  # hand over the last counts
            await self._redis.aclose()

    async def _run(self) -> None:
        while True:
            await sleep_to_tick(self.sync_s)
            try:
                await self.sync()
                self.outage.ok()
            except REDIS_FAILURES as exc:
                self.outage.failed(exc)
            except Exception:  # a bug: logged, and the next round tries again (the task must not end)
                log.exception("usage sharing: sync failed")

    async def sync(self, now: float | None = None) -> None:
        """Add pending counts to Redis and read back every replica's totals (one round trip: ledger_wire.py).
        `now`: the clock's time (a test's own clock)."""
        now = time.time() if now is None else now
        self._forget_old(now)
        if self._redis is None:
            await self._save_spend_file()
            return
        pending, self._pending = self._pending, {}
        rates, self._rate_pending = self._rate_pending, {}
        minute = int(now // 60)
        recent = {k: t for k, t in self._recent.items() if t > now - ACTIVE_S}
        rate_rows = [(self._rate_name(kind, key_id, second // 60), second, amount)
                     for (kind, key_id), seconds in rates.items() for second, amount in seconds.items()]
        try:
            names = [self._spend_name(key, now) for key in self.budgeted() if key.budget_usd is not None]
            spend_totals, ids, rate_texts, values = await self._redis.eval(
                SYNC_SCRIPT, 1, f"{self.prefix}:active",
                lines((name, amount, self._ttl.get(name, _RATE_TTL_S)) for name, amount in pending.items()),
                lines(rate_rows), _RATE_TTL_S, lines(recent.items()), now - ACTIVE_S, self.prefix,
                minute - 1, minute, "".join(f"{name}\n" for name in names))
            counts = read_rates(ids, rate_texts, int(now) - SLOTS)
        except BaseException:
            for name, amount in pending.items():  # counted again at the next sync
                self._pending[name] = self._pending.get(name, 0.0) + amount
            for rate, seconds in rates.items():
                mine = self._rate_pending.setdefault(rate, {})
                for second, amount in seconds.items():
                    mine[second] = mine.get(second, 0.0) + amount
            raise
        for rate, seconds in self._rate_pending.items():  # counted while we waited: not in Redis yet
            target = counts.setdefault(rate, SlidingMinute())
            for second, amount in seconds.items():
                target.add(second, amount)
        self._counts = counts
        values = await self._adopt_legacy_spend(names, values)
        shared = {name: float(v) for name, v in zip(names, values, strict=True) if v is not None}
        for name, total in zip(pending, spend_totals, strict=True):
            shared.setdefault(name, float(total))
        self._shared = shared

    async def _adopt_legacy_spend(self, names: list[str], values: list[bytes | None]) -> list[bytes | float | None]:
        """Spend an earlier version counted under `<prefix>:use:usd:...` (no hash tag) moves to the new
        name, once per name and process; GETDEL hands it to exactly one replica."""
        out: list[bytes | float | None] = list(values)
        for i, (name, value) in enumerate(zip(names, values, strict=True)):
            if value is not None or name in self._adopted or not name.startswith(f"{self.prefix}:usd:"):
                continue
            old = await self._redis.getdel(self._legacy_prefix + name[len(self.prefix):])  # type: ignore[union-attr]
            self._adopted.add(name)
            if old is not None:
                out[i] = await self._redis.incrbyfloat(name, float(old))  # type: ignore[union-attr]
                await self._redis.expire(name, max(_SPEND_TTL_S.values()))  # type: ignore[union-attr]
        return out

    def _forget_old(self, now: float) -> None:
        """Drop budget periods that have ended, and the counts of keys not used for two minutes."""
        live_periods = {period_id("day", now), period_id("month", now)}
        for table in (self._shared, self._pending):
            for name in [n for n in table if n.rsplit(":", 1)[-1] not in live_periods]:
                del table[name]
                self._ttl.pop(name, None)
        self._recent = {k: t for k, t in self._recent.items() if t > now - ACTIVE_S}
        self._counts = {rate: c for rate, c in self._counts.items() if rate[1] in self._recent}

    async def load_spend_file(self) -> None:
        if self.spend_file is None:
            return
        saved = await asyncio.to_thread(_read_json, self.spend_file)
        live = {period_id("day", time.time()), period_id("month", time.time())}
        legacy = f"{self._legacy_prefix}:"  # a file written before hash tags
        self._shared.update({self.prefix + name[len(self._legacy_prefix):] if name.startswith(legacy) else name:
                             float(v) for name, v in saved.items()
                             if isinstance(v, int | float) and name.rsplit(":", 1)[-1] in live})

    async def _save_spend_file(self) -> None:
        if self.spend_file is None or not self._spend_changed:
            return
        self._spend_changed = False
        spend = {name: v for name, v in self._shared.items() if name.rsplit(":", 3)[-3] == "usd"}
        try:
            await asyncio.to_thread(_write_json, self.spend_file, spend)
        except OSError as err:
            self._spend_changed = True
            log.warning("cannot save spend to %s: %s", self.spend_file, err.strerror)

    async def read_spend(self, key: ApiKey, now: float) -> float:
        """The key's spend this period, read from Redis now (for the admin API, not for requests);
        this replica's view when Redis does not answer."""
        if self._redis is None:
            return self.spend(key, now)
        name = self._spend_name(key, now)
        try:
            value = await self._redis.get(name)
        except REDIS_FAILURES:
            return self.spend(key, now)
        return (float(value) if value is not None else 0.0) + self._pending.get(name, 0.0)


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return {}  # no file yet, or a torn one: spend starts from zero rather than the gateway not at all
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, float]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(orjson.dumps(data))
    os.replace(tmp, path)
