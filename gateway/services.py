"""The one `Services` object a running gateway owns: config, upstream pools, telemetry, router,
metrics, the access log, client access (keys, limits, spend) and stored Responses conversations.

Built in the app's lifespan by `open_services()` and closed there; stages receive it as an
argument. There are no module-level singletons.
"""

from __future__ import annotations

import os
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gateway.access.gate import Access
from gateway.access.keyring import KeyRing
from gateway.access.ledger import Ledger
from gateway.access.store import KeyStore, open_key_store
from gateway.accesslog import AccessLog
from gateway.config import Config
from gateway.dispatch import Dispatcher, DispatchLimits
from gateway.health import BreakerSettings, HealthBoard
from gateway.health_probe import ProbeLock, Prober
from gateway.health_share import HealthSharing
from gateway.metrics import Metrics, store_redis_errors
from gateway.preferences import Resolver
from gateway.record import Recorder
from gateway.retry import RetryBudget
from gateway.routing.router import Router, RouterSettings
from gateway.serve.lag import LoopLag
from gateway.sessions import Sessions, open_sessions
from gateway.telemetry import make_store
from gateway.telemetry.store import TelemetryStore
from gateway.upstream import TransportFactory, Upstreams


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


@asynccontextmanager
async def open_services(
    config: Config, transport_factory: TransportFactory | None = None
) -> AsyncIterator[Services]:
    replica_id = f"{os.uname().nodename}-{os.getpid()}"
    interval = config.gateway.telemetry_flush_s
    telemetry = make_store(config.redis_url, replica_id=replica_id,
                           key_prefix=f"{config.gateway.redis_key_prefix}:tel", flush_interval_s=interval,
                           record=config.gateway.record_stats)
    upstreams = Upstreams(config.catalogue.providers, transport_factory)
    settings = RouterSettings(explore_rate=config.gateway.explore_rate,
                              sticky_idle_s=config.gateway.sticky_idle_s)
    router = Router(config.catalogue, telemetry, settings, rng=random.Random(config.gateway.random_seed))
    health = HealthBoard(BreakerSettings(failure_threshold=config.gateway.breaker_failures,
                                         open_s=config.gateway.breaker_open_s,
                                         max_open_s=config.health.max_open_s))
    metrics = Metrics(config.catalogue, telemetry.in_flight, store_redis_errors(telemetry))
    health.on_change = metrics.circuit
    recorder = Recorder(telemetry, router, health, metrics)
    gw = config.gateway
    limits = DispatchLimits(stall_timeout_s=gw.stall_timeout_s, ttft_budget_multiplier=gw.ttft_budget_multiplier,
                            ttft_budget_min_s=gw.ttft_budget_min_s, ttft_budget_max_s=gw.ttft_budget_max_s,
                            deadline_s=gw.deadline_s, max_wait_s=config.retry.max_wait_s)
    lag = LoopLag(on_sample=metrics.event_loop_lag)
    dispatcher = Dispatcher(upstreams, recorder, health, telemetry, limits, RetryBudget(gw.retry_budget), lag)
    dispatcher.on_retry = lambda endpoint, err: metrics.retry(endpoint, err.metric_label)
    access_log = AccessLog()
    key_store = open_key_store(config.redis_url, gw.redis_key_prefix, config.keys_file)
    keyring = None if config.open_access else KeyRing(key_store, refresh_s=gw.keys_refresh_s)
    ledger = Ledger(config.redis_url, gw.redis_key_prefix, gw.limits_sync_s,
                    budgeted=lambda: keyring.by_id.values() if keyring is not None else (),
                    spend_file=config.spend_file)
    access = Access(keyring, ledger, config.catalogue)
    ledger.outage.on_error = metrics.redis_error  # counted in ultraroute_redis_errors_total
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
    access_log.start()
    await lag.start()
    sessions = open_sessions(config.redis_url, gw.redis_key_prefix, config.sessions)
    sessions.outage.on_error = metrics.redis_error
    try:
        yield Services(
            config=config,
            upstreams=upstreams,
            telemetry=telemetry,
            router=router,
            resolver=Resolver(config.policies),
            recorder=recorder,
            health=health,
            dispatcher=dispatcher,
            replica_id=replica_id,
            metrics=metrics,
            access_log=access_log,
            access=access,
            key_store=key_store,
            sessions=sessions,
        )
    finally:
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
        await upstreams.aclose()
        await telemetry.stop()
