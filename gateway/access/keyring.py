"""The running gateway's view of the key store: every key by the hash of its secret, in memory.

A request's key is looked up here, never in Redis or the file: the request path does no I/O for
authentication. A background task polls the store's `version()` every `refresh_s` and reloads when
it changed, so a revoked key stops working within about that long on every replica. A secret that
is not in the view waits for one reload that starts after it (at most one every `miss_refresh_s`,
shared by all waiting requests), so a key created a moment ago on another replica works at once,
while a flood of wrong keys costs the store at most a few reads a second, each refused within
`miss_refresh_s` and a read. Store unreachable: the last view stays in force.

At start there is no last view: an unreadable store is read again, with backoff, for `start_timeout_s`
(a Redis Cluster electing a new primary, or one slow under load, answers within seconds), and only
then stops the gateway. Starting without keys instead would refuse every client with a 401, a wrong
answer; not starting lets the orchestrator's restart and readiness do their job.
"""

from __future__ import annotations

import asyncio
import logging
import time

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_delay, wait_exponential

from gateway.access.keys import ApiKey
from gateway.access.store import KeyStore, KeyStoreError
from gateway.background import Outage, cancel_and_wait, sleep_to_tick

log = logging.getLogger("ultraroute.access")


class KeyRing:
    def __init__(self, store: KeyStore, refresh_s: float = 1.0, miss_refresh_s: float = 0.5,
                 start_timeout_s: float = 15.0) -> None:
        self.store = store
        self.start_timeout_s = start_timeout_s
        self.refresh_s = refresh_s
        self.miss_refresh_s = miss_refresh_s
        self.by_hash: dict[str, ApiKey] = {}
        self.by_id: dict[str, ApiKey] = {}
        self._version: str | None = None
        self._loaded_at = 0.0
        self._reload: asyncio.Task[None] | None = None  # the reload a miss waits for ...
        self._reload_at = 0.0  # ... and when it starts (monotonic)
        self._task: asyncio.Task[None] | None = None
        self.outage = Outage(log, "client keys", "using the keys last loaded", store="the key store")

    async def start(self) -> None:
        """Load the keys, then keep them fresh. `KeyStoreError` if the store stays unreadable for
        `start_timeout_s`."""
        retrying = AsyncRetrying(retry=retry_if_exception_type(KeyStoreError), reraise=True,
                                 stop=stop_after_delay(self.start_timeout_s),
                                 wait=wait_exponential(multiplier=0.1, max=2.0), before_sleep=self._start_failed)
        async for attempt in retrying:
            with attempt:
                await self.reload()
        self._task = asyncio.create_task(self._poll())

    def _start_failed(self, state: RetryCallState) -> None:
        err = state.outcome.exception() if state.outcome else None
        log.warning("client keys: cannot load them at start (%s); trying again for up to %.0f s",
                    err, self.start_timeout_s)

    async def stop(self) -> None:
        for task in (self._task, self._reload):
            await cancel_and_wait(task)

    def active_count(self) -> int:
        return sum(1 for k in self.by_id.values() if k.active)

    async def reload(self) -> None:
        version = await self.store.version()
        keys = await self.store.load()
        self.by_id = keys
        self.by_hash = {k.key_hash: k for k in keys.values()}
        self._version = version
        self._loaded_at = time.monotonic()

    def put(self, key: ApiKey) -> None:
        """This replica just saved `key`: use it now rather than at the next poll."""
        self.by_id = {**self.by_id, key.id: key}
        self.by_hash = {k.key_hash: k for k in self.by_id.values()}

    async def lookup(self, key_hash: str) -> ApiKey | None:
        key = self.by_hash.get(key_hash)
        if key is not None:
            return key
        # Not in the view: wait for a reload that starts after this request came, the next one the rate
        # allows. Refused at once within `miss_refresh_s` of the last load instead, a key created a
        # moment after a reload was refused on its first use (401), as a wrong one is.
        asked = time.monotonic()
        while True:
            if self._reload is None or self._reload.done():
                self._reload_at = max(asked, self._loaded_at + self.miss_refresh_s)
                self._reload = asyncio.create_task(self._reload_quietly(self._reload_at - asked))
            reload_at = self._reload_at
            await asyncio.shield(self._reload)
            key = self.by_hash.get(key_hash)
            if key is not None or reload_at >= asked:
                return key

    async def _reload_quietly(self, after_s: float = 0.0) -> None:
        if after_s > 0:
            await asyncio.sleep(after_s)
        try:
            await self.reload()
        except KeyStoreError as err:
            self._loaded_at = time.monotonic()  # don't hammer a store that is down
            self.outage.failed(str(err))

    async def _poll(self) -> None:
        while True:
            await sleep_to_tick(self.refresh_s)
            try:
                if await self.store.version() != self._version:
                    await self.reload()
                self.outage.ok()
            except KeyStoreError as err:
                self.outage.failed(str(err))
