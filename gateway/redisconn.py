"""One way to open Redis: every Redis user (telemetry, health sharing, client keys, usage, the `keys`
command) calls `connect(url, ...)`, and names its keys under `hash_tag(...)`.

`REDIS_URL` forms (user and password optional everywhere; query parameters go to redis-py, e.g.
`ssl_ca_certs=/etc/redis/ca.pem`, `ssl_cert_reqs=none`, `ssl_check_hostname=false`):

    redis://[user:password@]host:6379/0                     one server
    rediss://[user:password@]host:6380/0                    one server over TLS
    redis+sentinel://[user:password@]host:26379,host2:26379/mymaster/0
                                                            Sentinel: the master named `mymaster` (db 0);
                                                            `?sentinel_password=...` if the sentinels need one
    rediss+sentinel://...                                   the same, TLS to the sentinels and the master
    redis+cluster://[user:password@]host:7000,host2:7001    Redis Cluster: any of its nodes (the rest are
                                                            discovered); db is always 0
    rediss+cluster://...                                    the same over TLS

Cluster safety: every script, transaction and multi-key command touches keys of ONE concern only, and
each concern's keys start with the same hash tag, `{<prefix>:<concern>}` (e.g. `{ur:tel}:b:...`,
`{ur:keys}`), so they share one cluster slot. Different concerns land on different slots (nodes).

    RedisUrlError    (a ConfigError) REDIS_URL cannot be read; raised when the configuration is loaded
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import NoBackoff
from redis.exceptions import RedisClusterException, RedisError

from gateway.configfile import ConfigError

AnyRedis = Redis | RedisCluster

# What a Redis outage raises. RedisClusterException is not a RedisError (e.g. "Redis Cluster cannot be
# connected" while no node answers), so catching RedisError alone would let a cluster outage kill a task.
REDIS_FAILURES: tuple[type[BaseException], ...] = (RedisError, RedisClusterException, OSError, asyncio.TimeoutError)

Kind = Literal["server", "sentinel", "cluster"]
_SCHEMES: dict[str, tuple[Kind, bool]] = {  # scheme -> (kind, TLS)
    "redis": ("server", False), "rediss": ("server", True), "unix": ("server", False),
    "redis+sentinel": ("sentinel", False), "rediss+sentinel": ("sentinel", True),
    "redis+cluster": ("cluster", False), "rediss+cluster": ("cluster", True),
}


class RedisUrlError(ConfigError):
    pass


@dataclass(frozen=True)
class RedisTarget:
    """A parsed REDIS_URL: what to connect to and redis-py's connection options."""

    kind: Kind
    url: str  # the URL as given (a single-server URL is handed to redis-py as is)
    hosts: tuple[tuple[str, int], ...] = ()  # sentinels or cluster nodes
    service: str = ""  # the Sentinel master name
    options: dict[str, Any] = field(default_factory=dict)  # redis-py keyword arguments (from the URL)


def parse_redis_url(url: str) -> RedisTarget:
    """Read a REDIS_URL (forms in the module docstring); RedisUrlError names what is wrong."""
    scheme = url.partition("://")[0].lower()
    if scheme not in _SCHEMES:
        raise RedisUrlError(f"REDIS_URL: unknown scheme '{scheme}://' (expected one of "
                            f"{', '.join(s + '://' for s in _SCHEMES)})")
    kind, tls = _SCHEMES[scheme]
    if kind == "server":
        try:
            parse_url(url)
        except ValueError as err:
            raise RedisUrlError(f"REDIS_URL: {err}") from None
        return RedisTarget("server", url)
    parts = urlsplit(url)
    userinfo, _, hostlist = parts.netloc.rpartition("@")
    hosts = tuple(_host_port(h, 26379 if kind == "sentinel" else 6379) for h in hostlist.split(",") if h)
    if not hosts:
        raise RedisUrlError(f"REDIS_URL: {scheme}:// needs at least one host:port")
    path = [p for p in parts.path.split("/") if p]
    service, db = "", "0"
    if kind == "sentinel":
        if not path or len(path) > 2:
            raise RedisUrlError("REDIS_URL: a Sentinel URL names its master: redis+sentinel://host:26379/mymaster[/db]")
        service, db = path[0], path[1] if len(path) == 2 else "0"
    elif path and path != ["0"]:
        raise RedisUrlError("REDIS_URL: Redis Cluster has only db 0")
    # redis-py reads the credentials and query options of a single-server URL with the same meaning
    single = f"{'rediss' if tls else 'redis'}://{userinfo + '@' if userinfo else ''}{hosts[0][0]}:{hosts[0][1]}/{db}"
    try:
        options = dict(parse_url(single + (f"?{parts.query}" if parts.query else "")))
    except ValueError as err:
        raise RedisUrlError(f"REDIS_URL: {err}") from None
    for key in ("host", "port"):
        options.pop(key, None)
    if options.pop("connection_class", None) is SSLConnection:
        options["ssl"] = True
    if kind == "cluster":
        options.pop("db", None)
    return RedisTarget(kind, url, hosts, service, options)


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    host, sep, port = text.rpartition(":") if not text.endswith("]") else (text, "", "")
    if not sep:
        host, port = text, str(default_port)
    try:
        return host.strip("[]"), int(port)
    except ValueError:
        raise RedisUrlError(f"REDIS_URL: '{text}' is not host:port") from None


def connect(url: str, *, timeout_s: float, decode_responses: bool = False, retries: bool = True) -> AnyRedis:
    """A client for REDIS_URL. Connects lazily: never blocks and never fails for an unreachable server.

    `retries=False` turns off redis-py's own retries of a failed command (for callers that retry
    themselves and must not send a write twice)."""
    target = parse_redis_url(url)
    common: dict[str, Any] = {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s,
                              "decode_responses": decode_responses, "health_check_interval": 0}
    if not retries:
        common["retry"] = Retry(NoBackoff(), 0)
    if target.kind == "server":
        return Redis.from_url(url, **common)
    options = {**target.options, **common}
    if target.kind == "cluster":
        nodes = [ClusterNode(host, port) for host, port in target.hosts]
        return RedisCluster(startup_nodes=nodes, **options)
    sentinel_auth = {"password": options.pop("sentinel_password", None),
                     "username": options.pop("sentinel_username", None)}
    sentinel_options = {k: v for k, v in options.items() if k.startswith(("socket_", "ssl"))}
    sentinel_options.update({k: v for k, v in sentinel_auth.items() if v})
    sentinel = Sentinel(list(target.hosts), sentinel_kwargs=sentinel_options, **options)
    return sentinel.master_for(target.service)


async def ensure_connected(client: AnyRedis) -> None:
    """Open (or reuse) a connection now, raising one of REDIS_FAILURES if Redis cannot be reached.

    Lets a caller tell "nothing was sent" from "sent, but the reply was lost". On a cluster this
    only checks that the cluster's layout is known: a node may still fail later in the round trip."""
    if isinstance(client, RedisCluster):
        await client.initialize()
        return
    pool = client.connection_pool
    conn = await pool.get_connection()
    await pool.release(conn)


def hash_tag(prefix: str) -> str:
    """`prefix` as a Redis Cluster hash tag, `{prefix}`: every key starting with it lands in one slot.
    A prefix that already holds a tag (`{...}`) is used as it is."""
    opening = prefix.find("{")
    if opening >= 0 and prefix.find("}", opening + 2) > opening:
        return prefix
    return f"{{{prefix}}}"
