"""Shared fixtures: a real Redis server (the machine's, or a private one this file starts)."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from tests.harness import ensure_binary, free_port


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class PrivateRedis:
    """A redis-server process owned by the tests: can be stopped and restarted on the same port."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.dir = tempfile.mkdtemp(prefix="ultraroute-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = ensure_binary("redis-server", "redis-server")
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while not _reachable("127.0.0.1", self.port):
            assert time.monotonic() < deadline, "private redis-server did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """The machine's Redis on 127.0.0.1:6379 when it answers, else a private redis-server."""
    if _reachable("127.0.0.1", 6379):
        yield "redis://127.0.0.1:6379/0"
        return
    server = PrivateRedis()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A redis-server of the test's own, for tests that stop and restart it."""
    server = PrivateRedis()
    server.start()
    try:
        yield server
    finally:
        server.stop()
