"""`gateway.sessions`: owner checks, expiry, the size cap and saves in flight, over the memory store."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from gateway.config import SessionsFile
from gateway.errors import ResponseNotFound, ServiceUnavailable
from gateway.sessions import MemoryStore, Sessions, StoredResponse
from gateway.sessions.store import StoreUnavailable

ALICE: Any = SimpleNamespace(id="key_alice")
BOB: Any = SimpleNamespace(id="key_bob")


def stored(response_id: str, owner: str | None = "key_alice", size: int = 10) -> StoredResponse:
    return StoredResponse(response_id, owner, ({"role": "user", "content": "x" * size},), {"id": response_id})


async def test_only_the_owner_reads_and_continues() -> None:
    sessions = Sessions(MemoryStore(10), SessionsFile())
    sessions.save_later(stored("r1"))
    assert (await sessions.load("r1", ALICE, "previous_response_id")).id == "r1"  # even before the save ends
    await asyncio.sleep(0)
    for who, rid in ((BOB, "r1"), (None, "r1"), (ALICE, "unknown")):
        with pytest.raises(ResponseNotFound) as err:
            await sessions.load(rid, who, "previous_response_id")
        assert err.value.param == "previous_response_id" and err.value.status == 404
    await sessions.delete("r1", ALICE)
    with pytest.raises(ResponseNotFound):
        await sessions.load("r1", ALICE, None)


async def test_expiry_entry_cap_and_size_cap() -> None:
    now = [0.0]
    store = MemoryStore(2, clock=lambda: now[0])
    sessions = Sessions(store, SessionsFile(ttl_s=10, max_bytes=1024))
    for rid in ("a", "b", "c"):
        sessions.save_later(stored(rid))
    sessions.save_later(stored("huge", size=2000))  # over max_bytes: not stored
    await asyncio.sleep(0.01)
    assert await store.get("a") is None and await store.get("huge") is None  # the oldest went first
    assert (await store.get("c")) is not None
    now[0] = 11.0
    assert await store.get("c") is None


class DownStore(MemoryStore):
    async def get(self, response_id: str) -> StoredResponse | None:
        raise StoreUnavailable("ConnectionError")


async def test_store_down_is_a_503() -> None:
    sessions = Sessions(DownStore(1), SessionsFile())
    with pytest.raises(ServiceUnavailable) as err:
        await sessions.load("r1", ALICE, "previous_response_id")
    assert err.value.status == 503 and sessions.outage.errors == 1
