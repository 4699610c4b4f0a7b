"""Usage counting: the sliding minute, spend per period, and sharing through a real Redis."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path

import pytest
from redis.exceptions import RedisError

from gateway.access.keys import KeySpec, new_key
from gateway.access.ledger import Ledger
from gateway.redisconn import connect


def test_memory_ledger_counts_and_forgets() -> None:
    ledger = Ledger(None, "t")
    key, _ = new_key(KeySpec(name="a", budget_usd=1, budget_period="day"))
    now = 1_800_000_000.0  # on a minute boundary
    ledger.count(key.id, now, requests=1, tokens=100)
    ledger.count(key.id, now + 1, requests=1)
    assert ledger.window("req", key.id, now + 2).estimate == 2
    assert ledger.window("tok", key.id, now + 2).estimate == 100
    assert ledger.window("req", key.id, now + 61).estimate == 1  # the first second has left the window
    ledger.charge(key, 0.25, now)
    ledger.charge(key, float("nan"), now)  # ignored, never poisons the total
    assert ledger.spend(key, now) == 0.25
    assert ledger.spend(key, now + 86_400) == 0  # a new day
    ledger._forget_old(now + 86_400)
    assert ledger._shared == {}


def test_spend_follows_the_period_and_a_changed_key() -> None:
    # The spend name is kept per key for the hour: a new day, or a key changed from a daily budget to a
    # monthly one, is charged and read under its own period's name at once.
    ledger = Ledger(None, "t")
    daily, _ = new_key(KeySpec(name="a", budget_usd=1, budget_period="day"))
    midnight = 1_800_057_600.0  # 2027-01-15 00:00 UTC
    ledger.charge(daily, 0.25, midnight - 1)
    assert ledger.spend(daily, midnight - 1) == 0.25
    assert ledger.spend(daily, midnight) == 0  # the next day, one second later
    ledger.charge(daily, 0.5, midnight)
    assert (ledger.spend(daily, midnight - 1), ledger.spend(daily, midnight)) == (0.25, 0.5)
    monthly = daily.model_copy(update={"budget_period": "month"})  # the same key, now budgeted by the month
    assert ledger.spend(monthly, midnight) == 0
    ledger.charge(monthly, 0.125, midnight)
    assert (ledger.spend(monthly, midnight), ledger.spend(daily, midnight)) == (0.125, 0.5)
    assert ledger.estimate("req", daily.id, midnight) == 0
    ledger.count(daily.id, midnight, requests=2)
    assert ledger.estimate("req", daily.id, midnight + 1) == ledger.window("req", daily.id, midnight + 1).estimate == 2


async def test_replicas_share_counts_through_redis(redis_url: str) -> None:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    key, _ = new_key(KeySpec(name="a", budget_usd=1))
    a = Ledger(redis_url, prefix, budgeted=lambda: (key,))
    b = Ledger(redis_url, prefix, budgeted=lambda: (key,))
    try:
        now = time.time()
        a.count(key.id, now, requests=3, tokens=50)
        a.charge(key, 0.5, now)
        assert b.window("req", key.id, now).estimate == 0  # nothing shared before a sync
        await a.sync()
        await b.sync()  # B never saw the key: it reads it because A marked it active
        assert b.window("req", key.id, now).estimate == 3
        assert b.window("tok", key.id, now).estimate == 50
        assert b.spend(key, now) == 0.5
        b.count(key.id, now, requests=1)
        assert b.window("req", key.id, now).estimate == 4  # shared total + its own pending
        await b.sync()
        await a.sync()
        assert a.window("req", key.id, now).estimate == 4
        assert await a.read_spend(key, now) == 0.5
    finally:
        await a.stop()
        await b.stop()


async def test_a_sync_is_one_round_trip_and_reads_both_minutes(redis_url: str) -> None:
    """One command a sync (ledger_wire.SYNC_SCRIPT: writes and read-back together), for a key whose
    counts straddle a minute boundary, and the spend of a key without a budget (its new total)."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    budgeted, _ = new_key(KeySpec(name="a", budget_usd=1))
    plain, _ = new_key(KeySpec(name="b"))
    a = Ledger(redis_url, prefix, budgeted=lambda: (budgeted,))
    b = Ledger(redis_url, prefix, budgeted=lambda: (budgeted,))
    calls: list[str] = []

    class Counting:
        def __init__(self, client: object) -> None:
            self.client = client

        def __getattr__(self, name: str) -> object:
            calls.append(name)
            return getattr(self.client, name)

    try:
        minute_end = (time.time() // 60 + 1) * 60
        await a.sync(now=minute_end + 1)  # looks once for spend counted before hash tags (a GETDEL)
        a.count(budgeted.id, minute_end - 2, requests=2, tokens=10)  # the last minute's hash
        a.count(budgeted.id, minute_end + 1, requests=3)  # this minute's
        a.charge(plain, 0.25, minute_end + 1)
        a._redis = Counting(a._redis)  # type: ignore[assignment]
        await a.sync(now=minute_end + 1)
        assert calls == ["eval"]
        assert a.spend(plain, minute_end + 1) == 0.25  # read back from its INCRBYFLOAT
        await b.sync(now=minute_end + 1)
        assert b.estimate("req", budgeted.id, minute_end + 1) == 5
        assert b.estimate("tok", budgeted.id, minute_end + 1) == 10
        assert b.estimate("req", budgeted.id, minute_end + 59) == 3  # the first two have left the window
    finally:
        await a.stop()
        await b.stop()


async def test_redis_down_keeps_counts_locally() -> None:
    ledger = Ledger("redis://127.0.0.1:1/0", "t")
    key, _ = new_key(KeySpec(name="a"))
    now = time.time()
    ledger.count(key.id, now, requests=2)
    with pytest.raises((RedisError, OSError)):  # the background task logs it; the counts must survive
        await ledger.sync()
    assert ledger.window("req", key.id, now).estimate == 2
    assert await ledger.read_spend(key, now) == 0  # falls back to the local view, no error
    await ledger.stop()


async def test_spend_counted_before_hash_tags_is_adopted_once(redis_url: str, tmp_path: Path) -> None:
    """A budget outlives the upgrade to hash-tagged names: spend under `<prefix>:use:usd:...` moves to
    `{<prefix>:use}:usd:...` exactly once (two replicas adopting at once do not double it)."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    key, _ = new_key(KeySpec(name="a", budget_usd=5))
    a = Ledger(redis_url, prefix, budgeted=lambda: (key,))
    b = Ledger(redis_url, prefix, budgeted=lambda: (key,))
    now = time.time()
    name = a._spend_name(key, now)
    legacy_name = f"{prefix}:use" + name[len(a.prefix):]
    client = connect(redis_url, timeout_s=2.0)
    try:
        await client.set(legacy_name, "1.5", ex=60)
        await asyncio.gather(a.sync(), b.sync())
        await a.sync()
        await b.sync()
        assert a.spend(key, now) == b.spend(key, now) == 1.5
        assert await client.get(legacy_name) is None
    finally:
        await client.delete(name)
        await client.aclose()
        await a.stop()
        await b.stop()
    # without Redis: a spend file written before hash tags is read under the new names
    spend_file = tmp_path / "keys.spend.json"
    spend_file.write_text(json.dumps({legacy_name: 2.0}))
    local = Ledger(None, prefix, spend_file=spend_file)
    await local.load_spend_file()
    assert local.spend(key, now) == 2.0
