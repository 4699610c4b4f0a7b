"""Shared fixtures: a real Redis (the machine's, or a private one), a real 3-node Redis Cluster, a TLS
Redis and a Sentinel; the processes are in `tests/redis_servers.py`.

`redis_url` is parametrized: every test that takes it runs against one server AND against the cluster
(ids `server` and `cluster`), so the telemetry, health-sharing and key/limit tests prove the key layout
cluster-safe.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import pytest

from tests.redis_servers import ClusterRedis, PrivateRedis, SentinelRedis, TlsRedis, reachable

__all__ = ["PrivateRedis"]  # tests import it from here

Server = TypeVar("Server", PrivateRedis, ClusterRedis, TlsRedis, SentinelRedis)


def running(server: Server) -> Iterator[Server]:
    """Start `server` for a fixture, stop it afterwards (also when starting failed half-way)."""
    try:
        server.start()
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def server_redis_url() -> Iterator[str]:
    """The machine's Redis on 127.0.0.1:6379 when it answers, else a private redis-server."""
    if reachable("127.0.0.1", 6379):
        yield "redis://127.0.0.1:6379/0"
        return
    for server in running(PrivateRedis()):
        yield server.url


@pytest.fixture(scope="session")
def cluster_redis() -> Iterator[ClusterRedis]:
    """A 3-node Redis Cluster (redis-server --cluster-enabled yes + redis-cli --cluster create)."""
    yield from running(ClusterRedis())


# Module scope (the servers behind it are the session's): a session-scoped parameter would make pytest
# run every module's `server` tests, then every module's `cluster` ones, setting up each module's own
# simulator and gateway fixtures again each time it comes back to the module.
@pytest.fixture(scope="module", params=["server", "cluster"])
def redis_url(request: pytest.FixtureRequest) -> str:
    """A REDIS_URL: one server, then a Redis Cluster (`redis+cluster://...`)."""
    if request.param == "cluster":
        return request.getfixturevalue("cluster_redis").url
    return request.getfixturevalue("server_redis_url")


@pytest.fixture(scope="session")
def tls_redis() -> Iterator[TlsRedis]:
    """A redis-server speaking only TLS (`rediss://`), with a self-signed certificate."""
    yield from running(TlsRedis())


@pytest.fixture(scope="session")
def sentinel_redis() -> Iterator[SentinelRedis]:
    """A private master and a Sentinel monitoring it (`redis+sentinel://`)."""
    yield from running(SentinelRedis())


@pytest.fixture
def private_redis() -> Iterator[PrivateRedis]:
    """A redis-server of the test's own, for tests that stop and restart it."""
    yield from running(PrivateRedis())
