"""The simulator as a whole: its endpoints and admin listener, in-process or as a blocking process.

Does: start/stop every endpoint listener and the admin listener (`Simulator`), and run them as a
foreground process until SIGINT/SIGTERM (`run`, used by `python -m gateway.simulator` and the CLI's
`ultraroute simulate`), on uvloop when it is installed.
Does not: implement endpoint behaviour (`endpoint.py`), HTTP (`http11.py`) or admin routes
(`admin.py`).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from types import TracebackType
from typing import Any

from gateway.simulator.admin import AdminApi
from gateway.simulator.config import EndpointProfile, SimConfig, load_sim_config
from gateway.simulator.endpoint import Endpoint
from gateway.simulator.http11 import HttpListener


class Simulator:
    """Simulated providers on loopback ports. Use `await start()` / `await stop()` or `async with`.

    Ports given as 0 are resolved at `start()`; `base_url()` and `admin_url` report the bound ones.
    """

    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.endpoints: dict[str, Endpoint] = {
            name: Endpoint(name, profile, config.host, config.seed)
            for name, profile in config.endpoints.items()
        }
        self._admin = HttpListener(
            AdminApi(self.endpoints, self.base_url).handle, config.host, config.admin_port
        )
        self._started = False

    async def start(self) -> None:
        try:
            for endpoint in self.endpoints.values():
                await endpoint.start()
            await self._admin.open()
        except BaseException:
            await self.stop()
            raise
        self._started = True

    async def stop(self) -> None:
        """Close every listener and abort open connections (in-flight requests count cancelled)."""
        await self._admin.close()
        for endpoint in self.endpoints.values():
            await endpoint.stop()
        # Give the cancelled request tasks a moment to unwind and record their outcome.
        await asyncio.sleep(0.01)
        self._started = False

    async def __aenter__(self) -> Simulator:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def _url_host(self) -> str:
        host = self.config.host
        if host in ("0.0.0.0", "::", ""):
            return "127.0.0.1"
        return f"[{host}]" if ":" in host else host

    def base_url(self, name: str) -> str:
        """OpenAI base URL of one endpoint, e.g. "http://127.0.0.1:9101/v1"."""
        return f"http://{self._url_host()}:{self.endpoints[name].port}/v1"

    @property
    def admin_url(self) -> str:
        """Root of the admin API, e.g. "http://127.0.0.1:9100" (routes live under /admin/)."""
        return f"http://{self._url_host()}:{self._admin.port}"

    # In-process conveniences, equivalent to the admin routes.

    async def patch(self, name: str, changes: dict[str, Any]) -> EndpointProfile:
        return await self.endpoints[name].apply_patch(changes)

    def stats(self, name: str) -> dict[str, Any]:
        return self.endpoints[name].stats()

    async def reset(self, profiles: bool = False) -> None:
        for endpoint in self.endpoints.values():
            await endpoint.reset(profiles)


async def serve(config: SimConfig) -> None:
    """Run until SIGINT/SIGTERM, printing each endpoint's base URL, then "simulator ready"."""
    sim = Simulator(config)
    await sim.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        for name in sim.endpoints:
            print(f"endpoint {name} {sim.base_url(name)}", flush=True)
        print(f"admin {sim.admin_url}", flush=True)
        print("simulator ready", flush=True)
        await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
        await sim.stop()


def run(config_path: Path) -> None:
    """Blocking entry point: load `config_path` and serve until SIGINT/SIGTERM."""
    config = load_sim_config(config_path)
    try:
        import uvloop  # optional speed-up, only needed when serving

        loop_factory = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(serve(config))
    sys.stdout.flush()
