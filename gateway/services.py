"""The one `Services` object a running gateway owns: config, upstream pools, telemetry, router.

Built in the app's lifespan by `open_services()` and closed there; stages receive it as an
argument. There are no module-level singletons.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from gateway.config import Config
from gateway.dispatch import DispatchLimits
from gateway.preferences import Resolver
from gateway.record import Recorder
from gateway.routing.router import Router, RouterSettings
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
    limits: DispatchLimits
    replica_id: str


@asynccontextmanager
async def open_services(
    config: Config, transport_factory: TransportFactory | None = None
) -> AsyncIterator[Services]:
    replica_id = f"{os.uname().nodename}-{os.getpid()}"
    interval = config.gateway.telemetry_flush_s
    telemetry = make_store(config.redis_url, replica_id=replica_id, key_prefix=f"{config.gateway.redis_key_prefix}:tel",
                           flush_interval_s=interval, refresh_interval_s=interval)
    upstreams = Upstreams(config.catalogue.providers, transport_factory)
    settings = RouterSettings(explore_rate=config.gateway.explore_rate,
                              sticky_idle_s=config.gateway.sticky_idle_s)
    router = Router(config.catalogue, telemetry, settings)
    await telemetry.start()
    try:
        yield Services(
            config=config,
            upstreams=upstreams,
            telemetry=telemetry,
            router=router,
            resolver=Resolver(config.policies),
            recorder=Recorder(telemetry, router),
            limits=DispatchLimits(
                first_token_budget_s=config.gateway.first_token_budget_s,
                stall_timeout_s=config.gateway.stall_timeout_s,
            ),
            replica_id=replica_id,
        )
    finally:
        await upstreams.aclose()
        await telemetry.stop()
