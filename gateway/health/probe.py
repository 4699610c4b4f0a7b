"""Background probes of open circuits, so that a recovery is seen within seconds, traffic or not.

While an endpoint's circuit is open for errors (`HealthBoard.wants_probe`), every `probe_interval_s`
(jittered by +-20 %, so replicas do not probe in step) this task sends it a 1-token completion
(`Dispatcher.probe`). A successful probe closes the circuit; a failed one keeps it open, never
longer than `health.max_open_s` (health/board.py). No client request is sent to an endpoint while its
circuit is open and probed.

At most one probe per endpoint is in flight across all replicas: a lock in Redis (`SET key token NX
PX ttl`, released by a compare-and-delete script; one key per endpoint, so every command touches a
single key and Redis Cluster is fine). The lock is taken here, in the background, never on a
request's path. Without Redis, or while it is down, the lock is this replica's own.

Probes are recorded in telemetry (their TTFT is a real measurement) and costed, but are not client
traffic: no key is charged and no request metric counts them. They are counted in
`ultraroute_probes_total` and `ultraroute_probe_cost_usd_total`, and each writes an access-log line
marked `"probe": true` (no request id, no key).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random

from gateway.background import Outage, cancel_and_wait
from gateway.config import Endpoint
from gateway.dispatch import Dispatcher
from gateway.health.board import HealthBoard
from gateway.observability.accesslog import AccessLog
from gateway.observability.metrics import Metrics
from gateway.redisconn import REDIS_FAILURES, connect, hash_tag
from gateway.telemetry.sample import Outcome

log = logging.getLogger("ultraroute.health")
JITTER = 0.2
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


class ProbeLock:
    """One probe per endpoint across replicas (Redis), or within this replica (no Redis / outage)."""

    def __init__(self, redis_url: str | None, prefix: str) -> None:
        self.prefix = hash_tag(f"{prefix}:probe")  # one key per lock; the tag keeps the rule (redisconn)
        self.outage = Outage(log, "probe lock", "each replica probes on its own")
        self._redis = None if redis_url is None else connect(redis_url, timeout_s=0.5)
        self._release = None if self._redis is None else self._redis.register_script(_RELEASE)

    async def acquire(self, endpoint_key: str, token: str, ttl_s: float) -> bool:
        if self._redis is None:
            return True
        try:
            taken = await self._redis.set(f"{self.prefix}:{endpoint_key}", token, nx=True,
                                          px=max(1, int(ttl_s * 1000)))
        except REDIS_FAILURES as exc:
            self.outage.failed(exc)
            return True
        self.outage.ok()
        return bool(taken)

    async def release(self, endpoint_key: str, token: str) -> None:
        if self._release is None:
            return
        try:
            await self._release(keys=[f"{self.prefix}:{endpoint_key}"], args=[token])
        except REDIS_FAILURES as exc:
            self.outage.failed(exc)  # the lock expires by itself

    async def aclose(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()


class Prober:
    def __init__(self, board: HealthBoard, endpoints: tuple[Endpoint, ...], dispatcher: Dispatcher,
                 metrics: Metrics, access_log: AccessLog, lock: ProbeLock, interval_s: float) -> None:
        self.board = board
        self.access_log = access_log
        self.endpoints = endpoints
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.lock = lock
        self.interval_s = interval_s
        self._rng = random.Random()
        self._task: asyncio.Task[None] | None = None
        self._probes: dict[str, asyncio.Task[None]] = {}  # endpoint key -> its probe in flight here

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        for task in list(self._probes.values()):
            await cancel_and_wait(task)
        await self.lock.aclose()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s * self._rng.uniform(1 - JITTER, 1 + JITTER))
            for endpoint in self.endpoints:
                if endpoint.key not in self._probes and self.board.wants_probe(endpoint):
                    task = asyncio.create_task(self.probe(endpoint))
                    self._probes[endpoint.key] = task
                    task.add_done_callback(lambda _, key=endpoint.key: self._probes.pop(key, None))

    async def probe(self, endpoint: Endpoint) -> None:
        """One probe, if no other replica is probing this endpoint now."""
        token = os.urandom(8).hex()
        # Held for as long as a probe can take: its first-token budget, then the rest of one token.
        ttl_s = self.dispatcher.first_token_budget(endpoint) + self.dispatcher.limits.stall_timeout_s
        if not await self.lock.acquire(endpoint.key, token, ttl_s):
            return
        try:
            if not self.board.begin_probe(endpoint):
                return
            ok = False
            try:
                sample = await self.dispatcher.probe(endpoint)
                ok = sample.outcome is Outcome.OK
                self.metrics.probe(endpoint, sample)
                self.access_log.probe(endpoint, sample)
            finally:
                self.board.end_probe(endpoint, ok)
        finally:
            await self.lock.release(endpoint.key, token)
