"""Stored Responses conversations: `store: true` keeps an answer, `previous_response_id` continues it.

    Sessions      what the pipeline and the routes call: load (owner-checked), save_later, delete
    StoredResponse  one stored answer: its id, the client key that made it, the whole conversation
                  so far as chat messages, and the `response` object `GET /v1/responses/{id}` returns
    MemoryStore   one process, bounded (max_entries, oldest first) and expiring (ttl_s)
    RedisStore    shared by every replica and surviving restarts (store.py)

The one Redis round trip on a request's path is the `load` of a request that names a
`previous_response_id`: the history is needed before the request can be routed, so it cannot wait.
It is bounded by `sessions.timeout_s`; Redis down answers 503, never hangs. Saving happens after
the client has its answer, in the background. Every operation touches one key, so Redis Cluster
needs no hash tags here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from gateway.access.keys import ApiKey
from gateway.background import Outage
from gateway.config import SessionsFile
from gateway.errors import ResponseNotFound, ServiceUnavailable
from gateway.sessions.store import MemoryStore, RedisStore, SessionStore, StoredResponse, StoreUnavailable

__all__ = ["MemoryStore", "RedisStore", "SessionStore", "Sessions", "StoredResponse", "open_sessions"]

log = logging.getLogger("ultraroute.sessions")


def owner_of(client: ApiKey | None) -> str | None:
    """Whose a stored response is: the client key's id; None in open mode (then anyone with the id)."""
    return client.id if client is not None else None


class Sessions:
    def __init__(self, store: SessionStore, settings: SessionsFile) -> None:
        self.store = store
        self.settings = settings
        self.outage = Outage(log, "the session store", "stored responses cannot be read or continued")
        self._saving: set[asyncio.Task[None]] = set()
        # Answers whose save has not finished: a client continuing at once on this replica finds them.
        self._pending: dict[str, StoredResponse] = {}
        self.on_saved: Callable[[str], None] = lambda response_id: None  # tests wait on it

    async def load(self, response_id: str, client: ApiKey | None, param: str | None) -> StoredResponse:
        """The stored response, if it exists and belongs to `client`'s key; else 404 naming `param`."""
        try:
            stored = self._pending.get(response_id) or await self.store.get(response_id)
        except StoreUnavailable as err:
            self.outage.failed(err)
            raise ServiceUnavailable("The session store cannot be reached; stored responses cannot be read or "
                                     "continued now. Retry, or send the whole conversation.", param=param) from None
        self.outage.ok()
        if stored is None or stored.owner != owner_of(client):
            raise ResponseNotFound(response_id, param)
        return stored

    async def delete(self, response_id: str, client: ApiKey | None) -> None:
        await self.load(response_id, client, None)
        self._pending.pop(response_id, None)
        try:
            await self.store.delete(response_id)
        except StoreUnavailable as err:
            self.outage.failed(err)
            raise ServiceUnavailable("The session store cannot be reached.") from None

    def save_later(self, stored: StoredResponse) -> None:
        """Store in the background, off the client's path. Too large a conversation is not stored."""
        data = stored.encode()
        if len(data) > self.settings.max_bytes:
            log.warning("response %s not stored: %d bytes is over sessions.max_bytes (%d)", stored.id, len(data),
                        self.settings.max_bytes)
            return
        self._pending[stored.id] = stored
        task = asyncio.ensure_future(self._save(stored.id, data))
        self._saving.add(task)
        task.add_done_callback(self._saving.discard)

    async def _save(self, response_id: str, data: bytes) -> None:
        try:
            await self.store.put(response_id, data, self.settings.ttl_s)
        except StoreUnavailable as err:
            self.outage.failed(err)
            return
        finally:
            self._pending.pop(response_id, None)
        self.outage.ok()
        self.on_saved(response_id)

    async def aclose(self) -> None:
        if self._saving:
            await asyncio.wait(set(self._saving), timeout=self.settings.timeout_s * 2)
        await self.store.aclose()


def open_sessions(redis_url: str | None, key_prefix: str, settings: SessionsFile) -> Sessions:
    store: Any = (RedisStore(redis_url, f"{key_prefix}:resp", settings.timeout_s) if redis_url
                  else MemoryStore(settings.max_entries))
    return Sessions(store, settings)
