"""Warm-up: measure every endpoint nobody has measured before this replica says it is ready.

A gateway that has just started knows its endpoints only by their catalogue claims. The first burst
of requests is routed on those claims and split evenly between the endpoints not yet measured (the
trial share, routing/speed.py), so a tier whose advertised speed is false, or one that is truthfully
slow, takes as large a share of that burst as the fastest one; each of those requests runs slowly
to its end. Envoy's answer is `ignore_new_hosts_until_first_hc`; this is ours.

With `health.warm_up: true`, at start each chat endpoint with no decode rate measured in the
routing window (`STATS_WINDOW_S`) -- by this replica or, with Redis, by any (the first read of the
shared view is awaited, at most `VIEW_WAIT_S`) -- is sent one streamed completion of
`health.warm_up_tokens` output tokens, all at once (at most `CONCURRENCY` in flight). Its TTFT and
decode rate are recorded as the probes of open circuits are (health/probe.py): in telemetry and in
the router's speed model, costed, counted in `ultraroute_probes_total`, logged with `"probe": true`,
never charged to a key. `/healthz` answers 503 `warming_up` until every one has answered or
`health.warm_up_timeout_s` has passed; requests that come earlier are served, on what is known.

Off by default: each start spends `warm_up_tokens` output tokens per endpoint. Replicas that start
together (`serve --workers N`) each measure what none has shared yet. Endpoints added by a reload
are not warmed up: by then the gateway has traffic to learn from.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gateway.background import cancel_and_wait
from gateway.config import Endpoint
from gateway.dispatch import Dispatcher
from gateway.observability.accesslog import AccessLog
from gateway.observability.metrics import Metrics
from gateway.routing.router import STATS_WINDOW_S, Router
from gateway.telemetry.store import TelemetryStore

log = logging.getLogger("ultraroute.health")
CONCURRENCY = 16  # warm-up completions in flight at once
VIEW_WAIT_S = 2.0  # at most this long for the shared view (Redis) before deciding what is unmeasured


class WarmUp:
    def __init__(self, endpoints: tuple[Endpoint, ...], dispatcher: Dispatcher, router: Router,
                 telemetry: TelemetryStore, metrics: Metrics, access_log: AccessLog, tokens: int,
                 timeout_s: float) -> None:
        self.endpoints = tuple(e for e in endpoints if "chat" in e.apis)
        self.dispatcher = dispatcher
        self.router = router
        self.telemetry = telemetry
        self.metrics = metrics
        self.access_log = access_log
        self.tokens = tokens
        self.timeout_s = timeout_s
        self.done = False  # every endpoint has answered, or the time is up: /healthz says ready
        self.measured: list[str] = []  # endpoint keys whose warm-up completion gave a decode rate
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="warm-up")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _run(self) -> None:
        started = time.perf_counter()
        todo: list[Endpoint] = []
        try:
            async with asyncio.timeout(self.timeout_s):
                try:
                    async with asyncio.timeout(min(VIEW_WAIT_S, self.timeout_s / 2)):
                        await self.telemetry.view_read()
                except TimeoutError:
                    pass  # Redis is slow or down: what this replica does not see is measured again
                todo = [e for e in self.endpoints if not self._measured(e)]
                slots = asyncio.Semaphore(CONCURRENCY)
                for endpoint, result in zip(todo, await asyncio.gather(
                        *(self._one(e, slots) for e in todo), return_exceptions=True), strict=True):
                    if isinstance(result, Exception):  # a bug: one endpoint's must not stop the others
                        log.error("warm-up of %s failed", endpoint.key, exc_info=result)
        except TimeoutError:
            log.warning("warm-up: %d of %d endpoints measured within %.0f s; ready without the rest",
                        len(self.measured), len(todo), self.timeout_s)
        finally:
            self.done = True
        log.info("warm-up: %d of %d chat endpoints measured in %.1f s (%d already were)", len(self.measured),
                 len(todo), time.perf_counter() - started, len(self.endpoints) - len(todo))

    def _measured(self, endpoint: Endpoint) -> bool:
        return self.telemetry.stats(endpoint.key, STATS_WINDOW_S).decode_tps is not None

    async def _one(self, endpoint: Endpoint, slots: asyncio.Semaphore) -> None:
        async with slots:
            sample = await self.dispatcher.probe(endpoint, self.tokens)
        self.router.observe(sample)  # the router's own speed model: its first rate replaces the claim
        self.metrics.probe(endpoint, sample)
        self.access_log.probe(endpoint, sample)
        if sample.decode_tps is not None:
            self.measured.append(endpoint.key)
