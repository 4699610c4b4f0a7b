"""The one `Services` object a running gateway owns: config, upstream pools, telemetry, router,
metrics, the access log, client access (keys, limits, spend) and stored Responses conversations.

Built in the app's lifespan by `open_services()` and closed there; stages receive it as an
argument. There are no module-level singletons. A reload (`serve/reload.py`) builds a new one with
`reconfigure()`: requests in flight keep the object they started with, new ones get the new one.
"""

from __future__ import annotations

import functools
import os
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace

from gateway.access.gate import Access
from gateway.access.keyring import KeyRing
from gateway.access.ledger import Ledger
from gateway.access.store import KeyStore, open_key_store
from gateway.capacity import Capacity
from gateway.config import Config
from gateway.dispatch import Dispatcher, DispatchLimits
from gateway.health.board import BreakerSettings, HealthBoard
from gateway.health.probe import ProbeLock, Prober
from gateway.health.share import HealthSharing
from gateway.health.warm_up import WarmUp
from gateway.observability.accesslog import AccessLog
from gateway.observability.metrics import Metrics, store_redis_errors
from gateway.preferences import Resolver
from gateway.record import Recorder
from gateway.retry import RetryBudget
from gateway.routing.router import Router, RouterSettings
from gateway.serve.lag import LoopLag
from gateway.sessions import Sessions, open_sessions
from gateway.shaper import Shaper
from gateway.telemetry import make_store
from gateway.telemetry.store import TelemetryStore
from gateway.upstreams.aiohttp_tuned import connector_class
from gateway.upstreams.client import TransportFactory, Upstreams


@dataclass(frozen=True, slots=True)
class Services:
    config: Config
    upstreams: Upstreams
    telemetry: TelemetryStore
    router: Router
    resolver: Resolver
    recorder: Recorder
    health: HealthBoard
    dispatcher: Dispatcher
    replica_id: str
    metrics: Metrics
    access_log: AccessLog
    access: Access
    key_store: KeyStore
    sessions: Sessions  # stored Responses conversations
    sharing: HealthSharing | None = None
    prober: Prober | None = None
    warm_up: WarmUp | None = None  # /healthz is not ready until it is done


def _configured(config: Config, upstreams: Upstreams, telemetry: TelemetryStore, health: HealthBoard,
                metrics: Metrics, keyring: KeyRing | None, ledger: Ledger, capacity: Capacity | None,
                budget: RetryBudget, lag: LoopLag | None,
                shaper: Shaper | None) -> tuple[Router, Recorder, Dispatcher, Resolver, Access]:
    """The parts built from the catalogue and policies: at start, and again at each reload."""
    gw = config.gateway
    router = Router(config.catalogue, telemetry, RouterSettings(explore_rate=gw.explore_rate,
                                                                sticky_idle_s=gw.sticky_idle_s),
                    rng=random.Random(gw.random_seed), unavailable=health.unavailable)
    recorder = Recorder(telemetry, router, health, metrics, capacity, lag)
    limits = DispatchLimits(stall_timeout_s=gw.stall_timeout_s, ttft_budget_multiplier=gw.ttft_budget_multiplier,
                            ttft_budget_min_s=gw.ttft_budget_min_s, ttft_budget_max_s=gw.ttft_budget_max_s,
                            deadline_s=gw.deadline_s, max_wait_s=config.retry.max_wait_s)
    dispatcher = Dispatcher(upstreams, recorder, health, telemetry, limits, budget, lag)
    dispatcher.on_retry = lambda endpoint, err: metrics.retry(endpoint, err.metric_label)
    dispatcher.shaper, dispatcher.shaper_wait_s = shaper, gw.shaper_wait_s
    health.settings = BreakerSettings(failure_threshold=gw.breaker_failures, open_s=gw.breaker_open_s,
                                      max_open_s=config.health.max_open_s)
    return router, recorder, dispatcher, Resolver(config.policies), Access(keyring, ledger, config.catalogue)


def reconfigure(old: Services, config: Config) -> tuple[Services, Upstreams]:
    """The services for a reloaded `config`, sharing the old ones' lasting state: telemetry (stats
    of endpoints that still exist are kept), health, metrics, keys and usage, the router's learning,
    the request shaper (its buckets' stock; changed `rate_limits` take a restart), the pools of
    providers whose settings did not change. Returns them with the old pools no longer
    used, which the caller closes once the requests still using them are done."""
    upstreams, retired = old.upstreams.successor(config.catalogue.providers)
    router, recorder, dispatcher, resolver, access = _configured(
        config, upstreams, old.telemetry, old.health, old.metrics, old.access.keyring, old.access.ledger,
        old.recorder.capacity, old.dispatcher.budget, old.dispatcher.lag, old.dispatcher.shaper)
    router.carry_over(old.router)
    old.recorder.capacity.max_wait_s = config.gateway.capacity_wait_s  # the queues themselves carry over
    old.dispatcher.budget.ratio = config.gateway.retry_budget
    old.metrics.catalogue_changed(config.catalogue)
    if old.sharing is not None:
        old.sharing.endpoints = {e.key: e for e in config.catalogue.endpoints()}
    if old.prober is not None:  # probes of open circuits go through the new pools, to today's endpoints
        old.prober.endpoints, old.prober.dispatcher = config.catalogue.endpoints(), dispatcher
    new = replace(old, config=config, upstreams=upstreams, router=router, resolver=resolver, recorder=recorder,
                  dispatcher=dispatcher, access=access)
    return new, retired


@asynccontextmanager
async def open_services(
    config: Config, transport_factory: TransportFactory | None = None
) -> AsyncIterator[Services]:
    replica_id = f"{os.uname().nodename}-{os.getpid()}"
    gw = config.gateway
    telemetry = make_store(config.redis_url, replica_id=replica_id,
                           key_prefix=f"{gw.redis_key_prefix}:tel", flush_interval_s=gw.telemetry_flush_s,
                           record=gw.record_stats)
    upstreams = Upstreams(config.catalogue.providers, transport_factory, connector_class())
    health = HealthBoard(BreakerSettings(failure_threshold=gw.breaker_failures, open_s=gw.breaker_open_s,
                                         max_open_s=config.health.max_open_s))
    metrics = Metrics(config.catalogue, telemetry.in_flight, store_redis_errors(telemetry))
    health.on_change = metrics.circuit
    lag = LoopLag(on_sample=metrics.event_loop_lag)
    access_log = AccessLog()
    key_store = open_key_store(config.redis_url, gw.redis_key_prefix, config.keys_file)
    keyring = None if config.open_access else KeyRing(key_store, refresh_s=gw.keys_refresh_s)
    # Open access counts no usage: its ledger shares none (no Redis round trips four times a second).
    ledger = Ledger(config.redis_url if keyring is not None else None, gw.redis_key_prefix, gw.limits_sync_s,
                    budgeted=lambda: keyring.by_id.values() if keyring is not None else (),
                    spend_file=config.spend_file)
    shaper = Shaper(config.catalogue.providers.values(), config.redis_url, gw.redis_key_prefix, gw.shaper_sync_s)
    shaper.on_queue = metrics.queue
    shaper.outage.on_error = metrics.redis_error
    router, recorder, dispatcher, resolver, access = _configured(
        config, upstreams, telemetry, health, metrics, keyring, ledger, Capacity(max_wait_s=gw.capacity_wait_s),
        RetryBudget(gw.retry_budget), lag, shaper)
    ledger.outage.on_error = metrics.redis_error  # counted in ultraroute_redis_errors_total
    recorder.capacity.on_queue = functools.partial(metrics.queue, line="capacity")  # kept across reloads
    if keyring is not None:
        keyring.outage.on_error = metrics.redis_error
        await keyring.start()
    await ledger.start()
    sharing = None
    if config.redis_url:
        sharing = HealthSharing(health, config.catalogue.endpoints(), config.redis_url, gw.redis_key_prefix)
        sharing.outage.on_error = metrics.redis_error
        await sharing.start()
    prober = None
    if config.health.probe:
        lock = ProbeLock(config.redis_url, gw.redis_key_prefix)
        lock.outage.on_error = metrics.redis_error
        prober = Prober(health, config.catalogue.endpoints(), dispatcher, metrics, access_log, lock,
                        config.health.probe_interval_s)
        await prober.start()
    await telemetry.start()
    await shaper.start()
    access_log.start()
    await lag.start()
    warm_up = None
    if config.health.warm_up:
        warm_up = WarmUp(config.catalogue.endpoints(), dispatcher, router, telemetry, metrics, access_log,
                         config.health.warm_up_tokens, config.health.warm_up_timeout_s)
        await warm_up.start()
    sessions = open_sessions(config.redis_url, gw.redis_key_prefix, config.sessions)
    sessions.outage.on_error = metrics.redis_error
    try:
        yield Services(
            config=config,
            upstreams=upstreams,
            telemetry=telemetry,
            router=router,
            resolver=resolver,
            recorder=recorder,
            health=health,
            dispatcher=dispatcher,
            replica_id=replica_id,
            metrics=metrics,
            access_log=access_log,
            access=access,
            key_store=key_store,
            sessions=sessions,
            sharing=sharing,
            prober=prober,
            warm_up=warm_up,
        )
    finally:
        if warm_up is not None:
            await warm_up.stop()
        await lag.stop()
        await sessions.aclose()
        access_log.stop()
        await ledger.stop()
        if keyring is not None:
            await keyring.stop()
        await key_store.aclose()
        if sharing is not None:
            await sharing.stop()
        if prober is not None:
            await prober.stop()
        await shaper.stop()
        await upstreams.aclose()
        await telemetry.stop()
