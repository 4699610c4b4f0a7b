"""gateway/redisconn.py: the REDIS_URL forms (one server, TLS, Sentinel, Cluster), each against a real
redis-server, and the hash-tag rule that keeps every concern's keys in one cluster slot."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import key_slot

from gateway.access.ledger import Ledger
from gateway.access.store import RedisKeyStore
from gateway.config import ConfigError, load_config
from gateway.redisconn import connect, hash_tag, parse_redis_url
from gateway.telemetry import RedisStore
from gateway.telemetry.redis_wire import KeyLayout
from gateway.telemetry.sample import Outcome
from tests.harness import ROOT
from tests.redis_servers import ClusterRedis, SentinelRedis, TlsRedis
from tests.telemetry.conftest import build_sample


def test_url_forms_parse() -> None:
    assert parse_redis_url("redis://h:6379/2").kind == "server"
    tls = parse_redis_url("rediss+cluster://u:p%40ss@a:7000,b:7001?ssl_cert_reqs=none")
    assert (tls.kind, tls.hosts) == ("cluster", (("a", 7000), ("b", 7001)))
    assert tls.options["ssl"] is True and tls.options["password"] == "p@ss" and tls.options["username"] == "u"
    sentinel = parse_redis_url("redis+sentinel://:pw@s1,s2:26380/mymaster/3?sentinel_password=x")
    assert (sentinel.kind, sentinel.service, sentinel.hosts) == ("sentinel", "mymaster", (("s1", 26379), ("s2", 26380)))
    assert sentinel.options["db"] == 3 and sentinel.options["password"] == "pw"


@pytest.mark.parametrize(("url", "says"), [
    ("http://h:6379", "unknown scheme"),
    ("redis+sentinel://h:26379", "names its master"),
    ("redis+cluster://h:7000/4", "only db 0"),
    ("redis+cluster://", "at least one host"),
    ("redis+cluster://h:port", "not host:port"),
])
def test_bad_urls_are_config_errors(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_redis_url(url)


def test_load_config_refuses_a_bad_redis_url(tmp_path: Path) -> None:
    (tmp_path / "providers.yaml").write_text((ROOT / "providers.demo.yaml").read_text())
    with pytest.raises(ConfigError, match="REDIS_URL"):
        load_config(tmp_path / "providers.yaml", env={"REDIS_URL": "redis+sentinel://h:1"})


def test_every_concern_keeps_its_keys_in_one_slot() -> None:
    assert hash_tag("ur:tel") == "{ur:tel}" and hash_tag("{mine}:x") == "{mine}:x"
    layout = KeyLayout.under("ur:tel")
    telemetry = [layout.bucket("m/a", 1), layout.bucket("m/b", 99), layout.inflight("r1"), layout.flush("t"),
                 layout.endpoints, layout.replicas, layout.late]
    assert len({key_slot(k.encode()) for k in telemetry}) == 1
    ledger = Ledger("redis://127.0.0.1:1/0", "ur")
    assert len({key_slot(ledger._rate_name(kind, key, 5).encode()) for kind in ("req", "tok") for key in "ab"}) == 1
    store = RedisKeyStore("redis://127.0.0.1:1/0", "ur")
    assert key_slot(store._hash.encode()) == key_slot(store._version.encode())
    # different concerns go to different slots: a cluster spreads them over its nodes
    assert len({key_slot(hash_tag(f"ur:{c}").encode()) for c in ("tel", "health", "keys", "use")}) == 4


async def _round_trip(url: str) -> None:
    client = connect(url, timeout_s=2.0, decode_responses=True)
    try:
        key = f"{{test:{uuid.uuid4().hex}}}:k"
        await client.set(key, "v", ex=30)
        assert await client.get(key) == "v"
    finally:
        await client.aclose()


async def _two_stores_share(url: str) -> None:
    """Two telemetry stores (two replicas) share a sample through this Redis."""
    prefix = f"ur:test:{uuid.uuid4().hex[:8]}"
    a = RedisStore(url, replica_id="A", key_prefix=prefix, flush_interval_s=0.1, refresh_interval_s=0.1)
    b = RedisStore(url, replica_id="B", key_prefix=prefix, flush_interval_s=0.1, refresh_interval_s=0.1)
    await a.start()
    await b.start()
    try:
        for _ in range(3):
            a.record(build_sample("m/x", at=time.time(), outcome=Outcome.OK))
        deadline = time.monotonic() + 5
        while b.stats("m/x", 60).requests < 3:
            assert time.monotonic() < deadline, "replica B never saw A's samples"
            b.cache_ttl_s = 0.0
            await asyncio.sleep(0.05)
    finally:
        await a.stop()
        await b.stop()


async def test_tls(tls_redis: TlsRedis) -> None:
    await _round_trip(tls_redis.url)
    await _two_stores_share(tls_redis.url)
    plain = tls_redis.url.replace("rediss://", "redis://").split("?")[0]
    with pytest.raises(redis.exceptions.ConnectionError):  # the server speaks TLS only: proof it was used
        await _round_trip(plain)


async def test_sentinel(sentinel_redis: SentinelRedis) -> None:
    client = connect(sentinel_redis.url, timeout_s=2.0)
    assert isinstance(client, Redis)
    await client.aclose()
    await _round_trip(sentinel_redis.url)
    await _two_stores_share(sentinel_redis.url)
    # the data is on the master the sentinel names
    master = redis.Redis.from_url(sentinel_redis.master_url)
    try:
        assert any(k.startswith(b"{ur:test:") for k in master.scan_iter(count=1000))
    finally:
        master.close()


async def test_cluster_spreads_concerns_over_nodes(cluster_redis: ClusterRedis) -> None:
    client = connect(cluster_redis.url, timeout_s=2.0)
    assert isinstance(client, RedisCluster)
    try:
        await client.initialize()
        nodes = {client.get_node_from_key(hash_tag(f"ur:{c}")).name for c in ("tel", "health", "keys", "use")}
        assert len(nodes) >= 2, nodes  # the four tags hash to slots owned by different nodes
    finally:
        await client.aclose()
