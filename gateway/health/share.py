"""Sharing endpoint health between replicas through Redis, in the background.

When this replica opens a circuit, demotes an endpoint for its SLO, or is told by a 429 to cool
down, `HealthBoard` notes it; every `interval_s` this task writes those notes to Redis (one key per
endpoint, expiring when the state does) and reads every endpoint's key back, so each replica skips
what any replica found broken. A closed circuit replaces its key by the time it closed (kept for
`max_open_s`, after which no circuit opened before it can still be open), and every replica closes a
circuit it opened before then: one replica's probe brings all of them back. The request path never waits on
Redis: it reads the board, which this task updates. Redis down: logged once, state stays local, and
sharing resumes when it answers.
"""

from __future__ import annotations

import asyncio
import logging
import time

import orjson

from gateway.background import Outage, cancel_and_wait, sleep_to_tick
from gateway.config import Endpoint
from gateway.health.board import HealthBoard
from gateway.redisconn import REDIS_FAILURES, connect, hash_tag

log = logging.getLogger("ultraroute.health")


class HealthSharing:
    def __init__(self, board: HealthBoard, endpoints: tuple[Endpoint, ...], redis_url: str, prefix: str,
                 interval_s: float = 0.25) -> None:
        self.board = board
        self.endpoints = {e.key: e for e in endpoints}
        self.prefix = hash_tag(f"{prefix}:health")  # one slot on a Redis Cluster: one MGET reads every endpoint
        self.interval_s = interval_s
        self.outage = Outage(log, "health sharing", "endpoint health stays local")
        self._redis = connect(redis_url, timeout_s=0.5)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        await self._redis.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.sync()
                self.outage.ok()
            except REDIS_FAILURES as exc:
                self.outage.failed(exc)
            except Exception:  # a bug: logged, and the next round tries again (the task must not end)
                log.exception("health sharing: sync failed")
            await sleep_to_tick(self.interval_s)

    async def sync(self) -> None:
        """Write this replica's changes (one pipelined round trip, when there are any), read everyone's
        (one MGET: a cluster pipeline refuses MGET, so it goes on its own)."""
        changes = self.board.take_changes()
        keys = list(self.endpoints)
        now = time.time()
        try:
            if changes:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for key, (reason, until) in changes.items():
                        if reason is None:  # closed at `until`
                            pipe.set(f"{self.prefix}:{key}", orjson.dumps({"closed": until}),
                                     px=max(1, int(self.board.settings.max_open_s * 1000)))
                        elif until > now:
                            pipe.set(f"{self.prefix}:{key}", orjson.dumps({"reason": reason, "until": until}),
                                     px=max(1, int((until - now) * 1000)))
                    await pipe.execute()
        except BaseException:
            self.board.restore_changes(changes)  # try again next round
            raise
        notes = await self._redis.mget([f"{self.prefix}:{k}" for k in keys])
        for key, raw in zip(keys, notes, strict=True):
            if raw is None:
                continue
            note = orjson.loads(raw)
            if "closed" in note:
                self.board.apply_remote_close(self.endpoints[key], float(note["closed"]))
            else:
                self.board.apply_remote(self.endpoints[key], str(note["reason"]), float(note["until"]))
