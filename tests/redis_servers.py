"""Private Redis deployments the tests start themselves: one server (stop/restart), a 3-node Redis Cluster,
a TLS server with a self-signed certificate, and a Sentinel watching a private master.

Every process is a real redis-server on free loopback ports, in a temporary directory, stopped afterwards.
"""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.harness import ensure_binary, free_port


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _wait(predicate, what: str, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"{what} did not come up"
        time.sleep(0.05)


class _Processes:
    """redis-server processes started by one fixture, stopped together."""

    def __init__(self, prefix: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix=prefix))
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, *args: str) -> None:
        binary = ensure_binary("redis-server", "redis-server")
        self.procs.append(subprocess.Popen([binary, *args], cwd=self.dir, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL))

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            proc.wait(timeout=10)
        self.procs.clear()


_EPHEMERAL = ("--bind", "127.0.0.1", "--save", "", "--appendonly", "no")


class PrivateRedis(_Processes):
    """A redis-server process owned by the tests: can be stopped and restarted on the same port."""

    def __init__(self, port: int | None = None, durable: bool = False) -> None:
        super().__init__("ultraroute-redis-")
        self.port = port or free_port()
        # Durable: an append-only file written at every command, so a stop and start keeps the data,
        # as a production Redis's restart does (keys and spend survive it).
        self.durable = durable

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        persistence = ("--save", "", "--appendonly", "yes", "--appendfsync", "always") if self.durable else \
            _EPHEMERAL[2:]
        self.spawn("--port", str(self.port), "--bind", "127.0.0.1", *persistence, "--dir", str(self.dir))
        _wait(lambda: reachable("127.0.0.1", self.port), "private redis-server")


class ClusterRedis(_Processes):
    """Three master nodes (no replicas) forming one Redis Cluster, slots split between them."""

    def __init__(self) -> None:
        super().__init__("ultraroute-cluster-")
        self.ports = [free_port() for _ in range(3)]

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def cli(self, port: int, *args: str) -> str:
        cli = ensure_binary("redis-cli", "redis-tools")
        return subprocess.run([cli, "-p", str(port), *args], capture_output=True, text=True, timeout=30,
                              check=True).stdout

    def start(self) -> None:
        for port in self.ports:
            # --cluster-port: the bus port would be port + 10000, which may be taken or above 65535
            self.spawn("--port", str(port), "--cluster-port", str(free_port()), "--cluster-enabled", "yes",
                       "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", "5000",
                       *_EPHEMERAL, "--dir", str(self.dir))
        for port in self.ports:
            _wait(lambda p=port: reachable("127.0.0.1", p), f"cluster node {port}")
        self.cli(self.ports[0], "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
                 "--cluster-replicas", "0", "--cluster-yes")
        for port in self.ports:
            _wait(lambda p=port: "cluster_state:ok" in self.cli(p, "cluster", "info"), f"cluster on {port}", 20)


class TlsRedis(_Processes):
    """A redis-server speaking only TLS, with a self-signed certificate for 127.0.0.1 (openssl)."""

    def __init__(self) -> None:
        super().__init__("ultraroute-tls-")
        self.port = free_port()
        self.cert = self.dir / "cert.pem"

    @property
    def url(self) -> str:
        return f"rediss://127.0.0.1:{self.port}/0?ssl_ca_certs={self.cert}"

    def start(self) -> None:
        openssl = ensure_binary("openssl", "openssl")
        key = self.dir / "key.pem"
        subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-keyout", str(key), "-out", str(self.cert), "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, timeout=60)
        self.spawn("--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.cert),
                   "--tls-key-file", str(key), "--tls-ca-cert-file", str(self.cert), "--tls-auth-clients", "no",
                   *_EPHEMERAL, "--dir", str(self.dir))
        _wait(lambda: _listening(self.port), "TLS redis-server")


class SentinelRedis(_Processes):
    """A private master and one Sentinel (`redis-server --sentinel`) monitoring it as `mymaster`."""

    def __init__(self) -> None:
        super().__init__("ultraroute-sentinel-")
        self.master = free_port()
        self.sentinel = free_port()

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel}/mymaster/0"

    @property
    def master_url(self) -> str:
        return f"redis://127.0.0.1:{self.master}/0"

    def start(self) -> None:
        self.spawn("--port", str(self.master), *_EPHEMERAL, "--dir", str(self.dir))
        _wait(lambda: reachable("127.0.0.1", self.master), "sentinel's master")
        conf = self.dir / "sentinel.conf"  # Sentinel rewrites its config file: it must be its own
        conf.write_text(f"port {self.sentinel}\nbind 127.0.0.1\ndir {self.dir}\n"
                        f"sentinel monitor mymaster 127.0.0.1 {self.master} 1\n")
        self.spawn(str(conf), "--sentinel")
        _wait(lambda: reachable("127.0.0.1", self.sentinel), "redis sentinel")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
