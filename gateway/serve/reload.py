"""Configuration reload without a restart: SIGHUP, or `POST /admin/reload` with the admin key.

    read      the catalogue and policies again, from the files the gateway started with
    check     exactly as at start-up; an invalid file is refused with the same `<file>: <key>:` message
              (logged; the admin route answers 400 with it) and the old configuration keeps serving
    swap      `app.state.services` is replaced in one assignment: new requests read the new one;
              requests in flight keep the object they started with, so streams finish on the old one
    retire    pools of removed or changed providers are closed once the requests in flight at the swap
              are done (at most the old `deadline_s` later)

What is kept: telemetry (stats of endpoints that still exist), circuit breakers, metrics, keys, usage
and spend, the router's learning. Settings read only at start (Redis prefix, flush intervals, key
store) are reported as needing a restart. The request path pays nothing for any of this: it already
reads `app.state.services` once per request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.config import Config, ConfigError, load_config
from gateway.serve.drain import Drain, Flight
from gateway.services import Services, reconfigure
from gateway.upstreams.client import Upstreams

log = logging.getLogger("ultraroute")

# `gateway:` settings that are read once, when the services start.
AT_START_ONLY = ("redis_key_prefix", "telemetry_flush_s", "record_stats", "keys_file", "keys_refresh_s",
                 "limits_sync_s")
RETIRE_SLACK_S = 5.0


@dataclass(frozen=True, slots=True)
class Reloaded:
    """What a reload changed."""

    source: str
    added: tuple[str, ...]  # endpoint keys
    removed: tuple[str, ...]
    restart_needed: tuple[str, ...]  # `gateway.<setting>` changed but read only at start

    def to_json(self) -> dict[str, Any]:
        return {"object": "reload", "source": self.source, "added": list(self.added),
                "removed": list(self.removed), "restart_needed": list(self.restart_needed)}


class Reloader:
    """Reloads the configuration of the services held in `holder.services` (the app's state)."""

    def __init__(self, holder: Any, drain: Drain, on_reload: Callable[[], None] | None = None) -> None:
        self.holder = holder
        self.drain = drain
        self.on_reload = on_reload  # e.g. the app's: forget the OpenAPI document (it names models)
        self._lock = asyncio.Lock()
        self._retiring: set[asyncio.Task[None]] = set()

    async def reload(self, why: str) -> Reloaded:
        """Read, check and swap in the configuration, logging the outcome (`why`: what asked);
        ConfigError (and nothing changed) if it is invalid."""
        try:
            done = await self._reload()
        except ConfigError as err:
            log.error("%s: configuration refused, still serving the previous one:\n%s", why, err)
            raise
        log.warning("%s: configuration reloaded from %s (endpoints added: %s; removed: %s)%s", why, done.source,
                    ", ".join(done.added) or "none", ", ".join(done.removed) or "none",
                    f"; needs a restart to apply: {', '.join(done.restart_needed)}" if done.restart_needed else "")
        return done

    async def _reload(self) -> Reloaded:
        async with self._lock:
            old: Services = self.holder.services
            path = old.config.catalogue_path
            if path is None:
                raise ConfigError("the configuration was not read from a file: nothing to reload")
            config = await asyncio.to_thread(load_config, path, old.config.policies_dir,
                                             open_access=old.config.open_access)
            new, retired = reconfigure(old, config)
            self.holder.services = new
            if self.on_reload is not None:
                self.on_reload()
            self._retire(retired, self.drain.snapshot(), old.config.gateway.deadline_s + RETIRE_SLACK_S)
            return _changes(old.config, config)

    def _retire(self, pools: Upstreams, users: frozenset[Flight], timeout_s: float) -> None:
        async def retire() -> None:
            try:
                await self.drain.wait_done(users, timeout_s, poll_s=0.5)
            finally:
                await pools.aclose()

        task = asyncio.create_task(retire())
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def aclose(self) -> None:
        """At shutdown: close the retired pools now."""
        for task in list(self._retiring):
            task.cancel()
        await asyncio.gather(*self._retiring, return_exceptions=True)


def _changes(old: Config, new: Config) -> Reloaded:
    before = {e.key for e in old.catalogue.endpoints()}
    after = {e.key for e in new.catalogue.endpoints()}
    restart = tuple(f"gateway.{name}" for name in AT_START_ONLY
                    if getattr(old.gateway, name) != getattr(new.gateway, name))
    return Reloaded(source=new.source, added=tuple(sorted(after - before)), removed=tuple(sorted(before - after)),
                    restart_needed=restart)
