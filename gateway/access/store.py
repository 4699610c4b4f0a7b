"""Where client keys live: a Redis hash when Redis is configured (every replica sees the same keys),
else a JSON file next to the catalogue. Both hold hashes only (`keys.ApiKey`), never secrets.

Both answer a cheap `version()` so that a running gateway notices keys created or revoked by the
`ultraroute keys` command or another replica without reloading them all every time (`keyring.py`
polls it). This module does not decide anything about requests.

    KeyStoreError          the store cannot be read or written (Redis down, unreadable file)
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import orjson
from pydantic import ValidationError

from gateway.access.keys import ApiKey
from gateway.redisconn import REDIS_FAILURES, connect, hash_tag


class KeyStoreError(Exception):
    pass


class KeyStore(Protocol):
    async def load(self) -> dict[str, ApiKey]:
        """Every key, revoked ones included, by id."""
        ...

    async def save(self, key: ApiKey) -> None:
        """Create or replace one key."""
        ...

    async def version(self) -> str:
        """Changes whenever a key is saved."""
        ...

    async def aclose(self) -> None: ...


def _parse(raw: bytes, where: str) -> ApiKey:
    try:
        return ApiKey.model_validate_json(raw)
    except ValidationError as err:
        raise KeyStoreError(f"{where}: not a valid key record ({err.error_count()} errors)") from None


class FileKeyStore:
    """A JSON file, `{"keys": [...]}`, written whole and atomically (temp file + rename), mode 0600.

    A lock file serialises writers, so the CLI and a running gateway can both add keys safely.
    File I/O runs in a thread: the event loop never waits on the disk."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _read(self) -> dict[str, ApiKey]:
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as err:
            raise KeyStoreError(f"{self.path}: {err.strerror}") from None
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as err:
            raise KeyStoreError(f"{self.path}: not valid JSON ({err})") from None
        records = data.get("keys") if isinstance(data, dict) else None
        if not isinstance(records, list):
            raise KeyStoreError(f"{self.path}: keys: expected a list of key records")
        keys = [_parse(orjson.dumps(r), f"{self.path}: keys[{i}]") for i, r in enumerate(records)]
        return {k.id: k for k in keys}

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(f"{self.path}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _write(self, key: ApiKey) -> None:
        with self._locked():
            keys = self._read()
            keys[key.id] = key
            body = orjson.dumps({"keys": [k.model_dump(mode="json") for k in keys.values()]},
                                option=orjson.OPT_INDENT_2)
            tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)

    def _version(self) -> str:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return "absent"
        return f"{st.st_mtime_ns}:{st.st_size}:{st.st_ino}"

    async def load(self) -> dict[str, ApiKey]:
        return await asyncio.to_thread(self._read)

    async def save(self, key: ApiKey) -> None:
        try:
            await asyncio.to_thread(self._write, key)
        except OSError as err:
            raise KeyStoreError(f"{self.path}: {err.strerror}") from None

    async def version(self) -> str:
        return await asyncio.to_thread(self._version)

    async def aclose(self) -> None:
        pass


class RedisKeyStore:
    """One Redis hash, `{<prefix>:keys}` (id -> JSON record), and a counter, `{<prefix>:keys}:version`,
    bumped on every save in the same transaction (one hash tag: one slot on a Redis Cluster).

    Keys stored by earlier versions under `<prefix>:keys` (no hash tag) are copied over on first load."""

    def __init__(self, redis_url: str, prefix: str) -> None:
        self._redis = connect(redis_url, timeout_s=1.0)
        self._hash = hash_tag(f"{prefix}:keys")
        self._version = f"{self._hash}:version"
        self._legacy_hash = f"{prefix}:keys"

    async def load(self) -> dict[str, ApiKey]:
        try:
            raw = await self._redis.hgetall(self._hash) or await self._adopt_legacy()
        except REDIS_FAILURES as err:
            raise KeyStoreError(f"Redis: cannot read the keys ({err})") from None
        keys = [_parse(v, f"Redis {self._hash}[{k.decode(errors='replace')}]") for k, v in raw.items()]
        return {k.id: k for k in keys}

    async def _adopt_legacy(self) -> dict[bytes, bytes]:
        """The keys of a pre-hash-tag store, copied under the new name (idempotent: same records)."""
        raw: dict[bytes, bytes] = await self._redis.hgetall(self._legacy_hash)
        if raw:
            await self._redis.hset(self._hash, mapping=raw)
            await self._redis.incr(self._version)
        return raw

    async def save(self, key: ApiKey) -> None:
        try:
            async with self._redis.pipeline(transaction=True) as pipe:
                pipe.hset(self._hash, key.id, key.model_dump_json())
                pipe.incr(self._version)
                await pipe.execute()
        except REDIS_FAILURES as err:
            raise KeyStoreError(f"Redis: cannot save the key ({err})") from None

    async def version(self) -> str:
        try:
            value = await self._redis.get(self._version)
        except REDIS_FAILURES as err:
            raise KeyStoreError(f"Redis: cannot read the keys' version ({err})") from None
        return value.decode() if value else "0"

    async def aclose(self) -> None:
        await self._redis.aclose()


def open_key_store(redis_url: str | None, prefix: str, keys_file: Path) -> KeyStore:
    return RedisKeyStore(redis_url, prefix) if redis_url else FileKeyStore(keys_file)
