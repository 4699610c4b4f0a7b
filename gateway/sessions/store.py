"""Where stored responses live: `MemoryStore` (one process) or `RedisStore` (every replica).

Both keep opaque bytes under a response id with a TTL; `StoredResponse` encodes and decodes them.
A Redis failure or a round trip slower than the timeout is a `StoreUnavailable`, never a hang.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from redis.exceptions import RedisError

from gateway.redisconn import connect


class StoreUnavailable(Exception):
    """The store could not be reached (or did not answer in time)."""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    id: str
    owner: str | None  # the client key's id; None in open mode
    messages: tuple[dict[str, Any], ...]  # the conversation so far, this answer included, as chat messages
    response: dict[str, Any]  # the `response` object, as GET /v1/responses/{id} returns it

    def encode(self) -> bytes:
        return orjson.dumps({"id": self.id, "owner": self.owner, "messages": self.messages,
                             "response": self.response})

    @classmethod
    def decode(cls, data: bytes) -> StoredResponse:
        raw = orjson.loads(data)
        return cls(raw["id"], raw["owner"], tuple(raw["messages"]), raw["response"])


class SessionStore(Protocol):
    async def get(self, response_id: str) -> StoredResponse | None: ...
    async def put(self, response_id: str, data: bytes, ttl_s: float) -> None: ...
    async def delete(self, response_id: str) -> None: ...
    async def aclose(self) -> None: ...


class MemoryStore:
    """In this process only: lost on restart, not shared with other replicas."""

    def __init__(self, max_entries: int, clock: Any = time.monotonic) -> None:
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._max = max_entries
        self._clock = clock

    async def get(self, response_id: str) -> StoredResponse | None:
        entry = self._entries.get(response_id)
        if entry is None:
            return None
        if entry[0] <= self._clock():
            del self._entries[response_id]
            return None
        return StoredResponse.decode(entry[1])

    async def put(self, response_id: str, data: bytes, ttl_s: float) -> None:
        self._entries[response_id] = (self._clock() + ttl_s, data)
        self._entries.move_to_end(response_id)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    async def delete(self, response_id: str) -> None:
        self._entries.pop(response_id, None)

    async def aclose(self) -> None:
        self._entries.clear()


class RedisStore:
    """One key per response (`<prefix>:<id>`) with Redis's own expiry: shared by replicas, kept
    across restarts. Every call is one single-key command, bounded by `timeout_s`."""

    def __init__(self, url: str, prefix: str, timeout_s: float) -> None:
        self._prefix = prefix
        # The project's one client factory: a plain server, rediss://, Sentinel or Cluster alike.
        self._redis = connect(url, timeout_s=timeout_s, retries=False)

    def _key(self, response_id: str) -> str:
        return f"{self._prefix}:{response_id}"

    async def get(self, response_id: str) -> StoredResponse | None:
        try:
            data = await self._redis.get(self._key(response_id))
        except (RedisError, OSError) as err:
            raise StoreUnavailable(f"{type(err).__name__}: {err}") from None
        return None if data is None else StoredResponse.decode(data)

    async def put(self, response_id: str, data: bytes, ttl_s: float) -> None:
        try:
            await self._redis.set(self._key(response_id), data, px=max(1, int(ttl_s * 1000)))
        except (RedisError, OSError) as err:
            raise StoreUnavailable(f"{type(err).__name__}: {err}") from None

    async def delete(self, response_id: str) -> None:
        try:
            await self._redis.delete(self._key(response_id))
        except (RedisError, OSError) as err:
            raise StoreUnavailable(f"{type(err).__name__}: {err}") from None

    async def aclose(self) -> None:
        await self._redis.aclose()
