"""End-to-end plumbing: the gateway as a real process on loopback, in front of a `SimProcess`.

`GatewayProcess` writes a catalogue, starts `python -m gateway serve` on a free port and waits for
`/healthz`; its stderr goes to a file the tests can read (log scans). `catalogue_for()` turns
"these simulated endpoints serve these models" into a catalogue dict.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from gateway.simulator.testing import free_port as free_port  # one definition, shared with the simulator's tests

ROOT = Path(__file__).resolve().parent.parent


def free_ports(count: int) -> int:
    """The first of `count` consecutive ports that were all free a moment ago."""
    for _ in range(50):
        first = free_port()
        with contextlib.ExitStack() as stack:
            try:
                for port in range(first, first + count):
                    stack.enter_context(socket.create_server(("127.0.0.1", port)))
            except OSError:
                continue
        return first
    raise RuntimeError("no run of free ports")


def ensure_binary(program: str, package: str) -> str:
    """The path of `program`, installing Debian's `package` first if it is missing (CI's fresh machine)."""
    found = shutil.which(program)
    if found:
        return found
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    # Another test run on this machine may be installing at the same moment: wait for dpkg's lock
    # rather than fail (`apt-get` gives up at once by default, exit status 100).
    wait = ["-o", "DPkg::Lock::Timeout=600"]
    subprocess.run(["apt-get", *wait, "update", "-qq"], check=False, env=env)
    subprocess.run(["apt-get", *wait, "install", "-y", "-qq", package], check=True, env=env)
    found = shutil.which(program)
    assert found, f"{package} could not be installed"
    return found


def wait_ready(proc: subprocess.Popen[bytes], url: str, timeout_s: float, what: str,
               log: Callable[[], str], poll_s: float = 0.05) -> None:
    """Wait until `url` answers 200; fail with the process's log if it exits or takes too long."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: {log()}")
        try:
            if httpx.get(url, timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start: {log()}")
        time.sleep(poll_s)


def terminate(proc: subprocess.Popen[bytes] | None) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if proc is not None and proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def catalogue_for(sim: Any, models: dict[str, list[dict[str, Any]]],
                  gateway: dict[str, Any] | None = None) -> dict[str, Any]:
    """Each endpoint dict names its simulated endpoint in `sim`; defaults fill the rest."""
    providers: dict[str, Any] = {}
    out_models: dict[str, Any] = {}
    for model, endpoints in models.items():
        rows = []
        for e in endpoints:
            e = dict(e)
            sim_name = e.pop("sim")
            region = e.pop("provider_region", "us")
            providers[sim_name] = {"base_url": sim.base_url(sim_name), "region": region}
            if "api" in e:  # the wire API the simulated provider is spoken to in
                providers[sim_name]["api"] = e.pop("api")
            e.setdefault("provider", sim_name)
            e.setdefault("model", f"upstream-{model}")
            e.setdefault("id", sim_name)
            if "hourly_cost" not in e:
                e.setdefault("price", {"input": 1.0, "output": 2.0})
            rows.append(e)
        out_models[model] = {"endpoints": rows}
    data: dict[str, Any] = {"providers": providers, "models": out_models}
    if gateway:
        data["gateway"] = gateway
    return data


class GatewayProcess:
    def __init__(self, catalogue: dict[str, Any], env: dict[str, str] | None = None,
                 policies: Path | None = ROOT / "policies", open_access: bool = True,
                 log_level: str = "info", workers: int = 1, serve_args: tuple[str, ...] = (),
                 policies_flag: bool = True, cwd: Path = ROOT) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ultraroute-gw-"))
        self.config = self.dir / "providers.yaml"
        self.config.write_text(yaml.safe_dump(catalogue))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.base_url = f"{self.url}/v1"
        self.log_path = self.dir / "gateway.log"
        # Only the Redis a test asks for: never one inherited from the developer's shell.
        self.env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "ULTRAROUTE_OPEN")} | (env or {})
        # Tests of routing run the gateway open (no client keys), as the issue asks fixtures to do;
        # tests of access control pass open_access=False.
        self.open_access = open_access
        self.policies = policies
        self.policies_flag = policies_flag  # False: no --policies at all (the gateway finds its own)
        self.cwd = cwd
        self.log_level = log_level
        self.workers = workers  # `serve --workers N`: N worker processes behind this one
        self.serve_args = serve_args  # more `serve` flags
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, tries: int = 3) -> GatewayProcess:
        self.launch()
        return self.ready(tries)

    def launch(self) -> None:
        """Start the process without waiting for it: `ready()` waits (see `together()`)."""
        args = [sys.executable, "-m", "gateway", "serve", "--config", str(self.config),
                "--port", str(self.port), "--log-level", self.log_level]
        if self.policies_flag:
            args += ["--policies", str(self.policies) if self.policies else ""]
        if self.open_access:
            args.append("--open")
        if self.workers != 1:
            args += ["--workers", str(self.workers)]
        args += self.serve_args
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(args, env=self.env, cwd=self.cwd, stdout=log, stderr=log)

    def ready(self, tries: int = 3) -> GatewayProcess:
        """Wait for the launched process's `/healthz`; stopped again if it fails to start."""
        assert self.proc is not None, "not launched"
        # Generous: a start takes ~2 s on an idle machine, but over 20 s on a 2-core one that other test
        # runs keep busy (main's own gateway too), and N workers import and start side by side.
        timeout_s = 60 if self.workers == 1 else 90
        try:
            wait_ready(self.proc, f"{self.url}/healthz", timeout_s, "gateway",
                       lambda: self.log_path.read_text()[-2000:])
        except BaseException as err:
            self.stop()  # `with` never reaches __exit__ when start fails: don't leave the process behind
            # free_port() can race with another process taking the port; pick another one.
            if not isinstance(err, RuntimeError) or tries <= 1 or "address already in use" not in str(err):
                raise
            self.port = free_port()
            self.url = f"http://127.0.0.1:{self.port}"
            self.base_url = f"{self.url}/v1"
            return self.start(tries - 1)
        return self

    def stop(self) -> None:
        terminate(self.proc)
        self.proc = None

    def keys(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`ultraroute keys ...` against this gateway's catalogue and environment (its key store)."""
        cmd = [sys.executable, "-m", "gateway", "keys", "--config", str(self.config),
               "--policies", str(self.policies or ROOT / "policies"), *args]
        return subprocess.run(cmd, env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=60)

    def create_key(self, *args: str) -> str:
        """A new client key (`keys create --name test ARGS`); returns its secret."""
        done = self.keys("create", "--name", "test", *args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip().splitlines()[-1]

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace")

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def together(*gateways: GatewayProcess) -> Iterator[None]:
    """`with together(a, b):` -- replicas started side by side (on two cores their start-ups overlap
    instead of queueing: a start is mostly imports) and all stopped on leaving, as `with a, b:` does."""
    with contextlib.ExitStack() as stack:
        for gw in gateways:
            stack.callback(gw.stop)
            gw.launch()
        for gw in gateways:
            gw.ready()
        yield
