"""Test plumbing: run the simulator as a subprocess and control it from (synchronous) tests.

Does: `make_sim_config()` builds a config dict with free loopback ports; `SimProcess` writes a
config to a temp file, starts `python -m gateway.simulator <file>` in its own process (own CPU and
GIL, so the code under test does not compete with it for the interpreter), waits for
`/admin/health`, offers sync admin helpers (patch, stats, reset, CPU time) and terminates it on
exit. Fixtures `sim_factory` (function scope) and `module_sim_factory` (module scope) start
simulators and stop them at teardown; use them via `pytest_plugins = ["gateway.simulator.testing"]`
or by importing them into a test module.
Does not: assert anything about the code under test, or run the simulator in-process (use
`gateway.simulator.Simulator` for that).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import pytest
import yaml

from gateway.simulator.config import SimConfig, parse_sim_config

_REPO_ROOT = Path(__file__).resolve().parents[2]


# Where free_port() looks: above the ports services usually take (Redis 6379, Prometheus 9090, ...), below
# the kernel's ephemeral range.
FIRST_FREE_PORT = 15000


def ephemeral_ports_start() -> int:
    """The first port of the range the kernel gives outgoing connections (Linux's default if unreadable)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago, picked at random below the kernel's ephemeral range.

    Not the kernel's own pick (bind to port 0): that comes from the ephemeral range, where any outgoing
    connection can take the port between this pick and the bind of the server it is for -- and the tests
    open thousands of connections, on two xdist workers at once. Another process's pick can still land
    on the same port (one in ~17k); GatewayProcess.start() retries on "address already in use"."""
    end = ephemeral_ports_start()
    for _ in range(100 if end - FIRST_FREE_PORT >= 1000 else 0):
        port = random.randrange(FIRST_FREE_PORT, end)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # an unusual range, or none free below it: the kernel's pick
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def make_sim_config(endpoints: dict[str, dict[str, Any]], **top: Any) -> dict[str, Any]:
    """A config dict for `SimProcess`: every endpoint without a (non-zero) port, and the admin
    port unless given, gets a free port. `top` sets top-level keys (host, seed, admin_port)."""
    host = top.get("host", "127.0.0.1")
    config: dict[str, Any] = {"host": host, "seed": 0, **top}
    taken = {config["admin_port"]} if config.get("admin_port") else set()
    taken |= {profile["port"] for profile in endpoints.values() if profile.get("port")}

    def distinct_port() -> int:
        # Each free_port() socket is closed before the next is bound, so the kernel may hand the
        # same port out twice (seen once in a busy test run): the config would then be refused.
        while (port := free_port(host)) in taken:
            pass
        taken.add(port)
        return port

    if not config.get("admin_port"):
        config["admin_port"] = distinct_port()
    config["endpoints"] = {
        name: {**profile, "port": profile.get("port") or distinct_port()}
        for name, profile in endpoints.items()
    }
    return config


class SimProcess:
    """A simulator subprocess. `with SimProcess(cfg) as sim:` starts it and stops it on exit."""

    def __init__(
        self,
        config: dict[str, Any] | SimConfig,
        *,
        startup_timeout: float = 15.0,
        python: str = sys.executable,
    ) -> None:
        if isinstance(config, SimConfig):
            self.config = config
        else:
            self.config = parse_sim_config(config)
        if self.config.admin_port == 0 or any(p.port == 0 for p in self.config.endpoints.values()):
            raise ValueError("SimProcess needs concrete ports: build the config with make_sim_config()")
        self._startup_timeout = startup_timeout
        self._python = python
        self._dir: Path | None = None
        self._log: Any = None
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: httpx.Client | None = None

    # ---- lifecycle ----------------------------------------------------------------------------

    def start(self) -> SimProcess:
        self._dir = Path(tempfile.mkdtemp(prefix="ultraroute-sim-"))
        config_path = self._dir / "sim.yaml"
        config_path.write_text(yaml.safe_dump(self.config.model_dump(mode="json"), sort_keys=False))
        env = dict(os.environ)
        # The child must import this very checkout, whatever the caller's working directory.
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO_ROOT), env.get("PYTHONPATH")) if p)
        self._log = (self._dir / "sim.log").open("wb")
        self.proc = subprocess.Popen(
            [self._python, "-m", "gateway.simulator", str(config_path)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
        self._client = httpx.Client(base_url=self.admin_url, timeout=10.0)
        deadline = time.monotonic() + self._startup_timeout
        while True:
            if self.proc.poll() is not None:
                log = self.log_text()
                self.stop()
                raise RuntimeError(f"simulator exited with {self.proc.returncode} during start-up:\n{log}")
            try:
                if self._client.get("/admin/health", timeout=1.0).json().get("ok"):
                    return self
            except (httpx.HTTPError, ValueError):
                pass
            if time.monotonic() > deadline:
                log = self.log_text()
                self.stop()
                raise RuntimeError(f"simulator not healthy after {self._startup_timeout} s:\n{log}")
            time.sleep(0.05)

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s; idempotent."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> SimProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- addresses ----------------------------------------------------------------------------

    @property
    def host(self) -> str:
        host = self.config.host
        return "127.0.0.1" if host in ("0.0.0.0", "") else host

    @property
    def admin_url(self) -> str:
        return f"http://{self.host}:{self.config.admin_port}"

    def base_url(self, name: str) -> str:
        return f"http://{self.host}:{self.config.endpoints[name].port}/v1"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    # ---- admin --------------------------------------------------------------------------------

    def _admin(self, method: str, path: str, json: Any = None) -> Any:
        assert self._client is not None, "not started"
        response = self._client.request(method, path, json=json)
        if response.status_code >= 400:
            raise RuntimeError(f"admin {method} {path} -> {response.status_code}: {response.text}")
        return response.json()

    def patch(self, name: str, **fields: Any) -> dict[str, Any]:
        """Change a live profile, e.g. `patch("a", ttft_ms=50, faults={"error_rate": 1.0})`."""
        return dict(self._admin("PATCH", f"/admin/endpoints/{name}", fields))

    def stats(self, name: str) -> dict[str, Any]:
        return dict(self._admin("GET", f"/admin/endpoints/{name}/stats"))

    def requests(self, name: str) -> list[dict[str, Any]]:
        """The last API requests `name` received (`{"path", "body"}`, oldest first)."""
        return list(self._admin("GET", f"/admin/endpoints/{name}/requests"))

    def endpoints(self) -> dict[str, Any]:
        return dict(self._admin("GET", "/admin/endpoints"))

    def reset(self, profiles: bool = False) -> None:
        self._admin("POST", "/admin/reset", {"profiles": profiles})

    def wait_for(
        self, name: str, predicate: Callable[[dict[str, Any]], bool], timeout: float = 5.0
    ) -> dict[str, Any]:
        """Poll `stats(name)` until `predicate` holds; returns those stats or raises TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats(name)
            if predicate(stats):
                return stats
            if time.monotonic() > deadline:
                raise TimeoutError(f"stats of {name!r} never matched: {stats}")
            time.sleep(0.02)

    def cpu_seconds(self) -> float:
        """User + system CPU time the simulator process has used (from /proc, Linux only)."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        # After the ")" closing the command name, utime and stime are the 12th and 13th fields.
        ticks = int(fields[11]) + int(fields[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def log_text(self) -> str:
        if self._dir is None or not (self._dir / "sim.log").exists():
            return ""
        if self._log is not None:
            self._log.flush()
        text = (self._dir / "sim.log").read_text(errors="replace")
        return text if len(text) <= 8000 else "...\n" + text[-8000:]


SimFactory = Callable[..., SimProcess]


def _factory() -> Iterator[SimFactory]:
    started: list[SimProcess] = []

    def start(endpoints: dict[str, dict[str, Any]], **top: Any) -> SimProcess:
        sim = SimProcess(make_sim_config(endpoints, **top)).start()
        started.append(sim)
        return sim

    try:
        yield start
    finally:
        for sim in reversed(started):
            sim.stop()


@pytest.fixture
def sim_factory() -> Iterator[SimFactory]:
    """`sim_factory({"a": {"ttft_ms": 100}}, seed=1) -> SimProcess`, stopped after the test."""
    yield from _factory()


@pytest.fixture(scope="module")
def module_sim_factory() -> Iterator[SimFactory]:
    """Like `sim_factory`, but the simulators live until the end of the test module."""
    yield from _factory()
