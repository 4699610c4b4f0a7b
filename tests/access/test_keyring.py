"""The in-memory key view: reloads on a miss (rate-limited) and when the store's version changes."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gateway.access.keyring import KeyRing
from gateway.access.keys import KeySpec, hash_secret, new_key
from gateway.access.store import FileKeyStore, KeyStoreError


class CountingStore(FileKeyStore):
    loads = 0

    async def load(self):  # type: ignore[no-untyped-def]
        self.loads += 1
        return await super().load()


@contextlib.asynccontextmanager
async def running_ring(tmp_path: Path, miss_refresh_s: float) -> AsyncIterator[tuple[CountingStore, KeyRing]]:
    """A key ring over a counting store at `tmp_path`, started, and stopped after the block."""
    store = CountingStore(tmp_path / "keys.json")
    ring = KeyRing(store, refresh_s=60, miss_refresh_s=miss_refresh_s)
    await ring.start()
    try:
        yield store, ring
    finally:
        await ring.stop()


async def test_a_key_saved_elsewhere_is_found_on_first_use(tmp_path: Path) -> None:
    async with running_ring(tmp_path, miss_refresh_s=0.0) as (_, ring):
        key, secret = new_key(KeySpec(name="a"))
        await FileKeyStore(tmp_path / "keys.json").save(key)  # another process (the CLI, a replica)
        assert await ring.lookup(hash_secret(secret)) == key


async def test_wrong_keys_reload_the_store_at_most_once_per_interval(tmp_path: Path) -> None:
    async with running_ring(tmp_path, miss_refresh_s=0.3) as (store, ring):
        loads = store.loads
        started = time.monotonic()
        results = await asyncio.gather(*(ring.lookup(hash_secret(f"ur-wrong-{i}")) for i in range(50)))
        assert results == [None] * 50
        assert store.loads == loads + 1  # one reload for all of them, once the interval allowed it
        assert time.monotonic() - started < 5
        results = await asyncio.gather(*(ring.lookup(hash_secret(f"ur-wrong-{i}")) for i in range(50)))
        assert results == [None] * 50 and store.loads == loads + 2


async def test_a_key_saved_just_after_a_reload_is_found_on_first_use(tmp_path: Path) -> None:
    # Within `miss_refresh_s` of a load, a miss used to be refused at once: a key the CLI had just
    # created was refused (401) on its first use when another key's creation had just been loaded.
    async with running_ring(tmp_path, miss_refresh_s=0.5) as (_, ring):
        await ring.reload()
        key, secret = new_key(KeySpec(name="a"))
        await FileKeyStore(tmp_path / "keys.json").save(key)
        assert await ring.lookup(hash_secret(secret)) == key


async def test_poll_picks_up_revocation_and_survives_a_broken_store(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys.json")
    key, secret = new_key(KeySpec(name="a"))
    await store.save(key)
    ring = KeyRing(store, refresh_s=0.05)
    await ring.start()
    try:
        await store.save(key.model_copy(update={"revoked_at": 1.0}))
        await asyncio.sleep(0.3)
        found = await ring.lookup(hash_secret(secret))
        assert found is not None and not found.active

        async def broken() -> str:
            raise KeyStoreError("down")
        store.version = broken  # type: ignore[method-assign]
        await asyncio.sleep(0.2)
        assert ring.active_count() == 0 and key.id in ring.by_id  # the last view stays in force
    finally:
        await ring.stop()


class FlakyStore(FileKeyStore):
    """Unreadable for its first `failures` reads, as a Redis Cluster is while it elects a primary."""

    def __init__(self, path: Path, failures: int) -> None:
        super().__init__(path)
        self.failures = failures
        self.reads = 0

    async def version(self) -> str:
        self.reads += 1
        if self.reads <= self.failures:
            raise KeyStoreError("Redis: cannot read the keys' version (Timeout reading from redis)")
        return await super().version()


async def test_a_store_unreadable_for_a_moment_at_start_is_read_again(tmp_path: Path) -> None:
    key, secret = new_key(KeySpec(name="a"))
    await FileKeyStore(tmp_path / "keys.json").save(key)
    store = FlakyStore(tmp_path / "keys.json", failures=2)
    ring = KeyRing(store, refresh_s=60, start_timeout_s=10)
    await ring.start()
    try:
        assert store.reads == 3
        assert await ring.lookup(hash_secret(secret)) == key
    finally:
        await ring.stop()


async def test_a_store_that_stays_unreadable_stops_the_start_after_its_timeout(tmp_path: Path) -> None:
    store = FlakyStore(tmp_path / "keys.json", failures=10**6)
    ring = KeyRing(store, refresh_s=60, start_timeout_s=0.3)
    with pytest.raises(KeyStoreError, match="keys' version"):
        await ring.start()
    assert store.reads >= 2  # tried again before giving up
