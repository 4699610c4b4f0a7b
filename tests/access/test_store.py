"""Key stores: a file (mode 0600, atomic) and Redis (a real server), both holding hashes only."""

from __future__ import annotations

import stat
import uuid
from pathlib import Path

import pytest

from gateway.access.keys import KeySpec, new_key
from gateway.access.store import FileKeyStore, KeyStoreError, RedisKeyStore
from gateway.redisconn import connect


async def test_file_store_round_trip(tmp_path: Path) -> None:
    store = FileKeyStore(tmp_path / "keys.json")
    assert await store.load() == {}
    before = await store.version()
    key, secret = new_key(KeySpec(name="a", models=("m",), rpm=3))
    await store.save(key)
    assert await store.version() != before
    assert (await store.load()) == {key.id: key}
    path = tmp_path / "keys.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert secret not in path.read_text()
    revoked = key.model_copy(update={"revoked_at": 1.0})
    await store.save(revoked)
    assert (await FileKeyStore(path).load())[key.id].active is False


async def test_file_store_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text('{"keys": [{"name": "x"}]}')
    with pytest.raises(KeyStoreError, match=r"keys.json: keys\[0\]"):
        await FileKeyStore(path).load()
    path.write_text("{nope")
    with pytest.raises(KeyStoreError, match=r"keys\.json: not valid JSON"):
        await FileKeyStore(path).load()


async def test_redis_store_round_trip(redis_url: str) -> None:
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    store = RedisKeyStore(redis_url, prefix)
    try:
        assert await store.load() == {}
        key, _secret = new_key(KeySpec(name="a"))
        await store.save(key)
        assert await store.version() == "1"
        other = RedisKeyStore(redis_url, prefix)  # another replica
        assert (await other.load()) == {key.id: key}
        await other.aclose()
    finally:
        await store.aclose()


async def test_redis_store_down_is_a_store_error() -> None:
    store = RedisKeyStore("redis://127.0.0.1:1/0", "x")
    with pytest.raises(KeyStoreError, match="Redis"):
        await store.load()
    await store.aclose()


async def test_redis_store_adopts_keys_stored_before_hash_tags(redis_url: str) -> None:
    """Keys an earlier version kept under `<prefix>:keys` are read and copied under `{<prefix>:keys}`."""
    prefix = f"test-{uuid.uuid4().hex[:8]}"
    key, _secret = new_key(KeySpec(name="old"))
    legacy = connect(redis_url, timeout_s=2.0)
    store = RedisKeyStore(redis_url, prefix)
    try:
        await legacy.hset(f"{prefix}:keys", key.id, key.model_dump_json())
        assert await store.load() == {key.id: key}
        assert await legacy.hget(f"{{{prefix}:keys}}", key.id) is not None  # copied under the new name
        assert await store.version() == "1"  # replicas polling the version see the change
    finally:
        await legacy.delete(f"{prefix}:keys")
        await legacy.aclose()
        await store.aclose()
