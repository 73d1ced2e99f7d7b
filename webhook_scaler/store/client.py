"""Reaching Redis in the topology `GRS_REDIS_URL` names: one server, a Redis Cluster, or a master that
Redis Sentinel watches.

Owns: the URL forms (`parse_url`, which settings validation uses too, so a bad URL stops the process at
startup) and building a client that fails fast (`connect`). Must not know any key or script: that is
the store's contract (`store.keys`), which keeps every key in one cluster slot.

- `redis://[user:pass@]host[:port][/db]` (and `rediss://`, `unix://`): one server, as redis-py reads it.
- `redis+cluster://[user:pass@]host[:port][,host[:port]...][/0]`: a `RedisCluster`; the nodes listed
  only seed discovery, the client learns the others and follows slot moves and failovers.
- `redis+sentinel://[user:pass@]host[:port][,host[:port]...]/service[/db]`: the master the Sentinels
  name for `service`, looked up again on every new connection, so the client follows a failover.

A `rediss+` scheme turns TLS on for every connection (Sentinels included). Ports default to 6379, and
to 26379 for Sentinels. In a Sentinel URL the user info authenticates to the Sentinels; the master
takes `GRS_REDIS_PASSWORD`. Elsewhere the URL's password wins over `GRS_REDIS_PASSWORD`, as redis-py
does. Error messages never repeat the URL: it may hold a password.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.connection import parse_url as parse_single_url
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool

Topology = Literal["single", "cluster", "sentinel"]

_SCHEMES: dict[str, tuple[Topology, bool]] = {
    "redis": ("single", False),
    "rediss": ("single", True),
    "unix": ("single", False),
    "redis+cluster": ("cluster", False),
    "rediss+cluster": ("cluster", True),
    "redis+sentinel": ("sentinel", False),
    "rediss+sentinel": ("sentinel", True),
}
_DEFAULT_PORT: dict[Topology, int] = {"single": 6379, "cluster": 6379, "sentinel": 26379}
HEALTH_CHECK_INTERVAL = 30


@dataclass(frozen=True, slots=True)
class RedisTarget:
    """What a Redis URL names. `nodes` is empty for one server: redis-py reads that URL itself."""

    topology: Topology
    tls: bool = False
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""
    db: int = 0
    username: str | None = None
    password: str | None = None


def parse_url(url: str) -> RedisTarget:
    """What `url` names; ValueError with a message naming the problem (never the URL) if it is unusable."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme.lower() not in _SCHEMES:
        raise ValueError("the Redis URL must start with one of: " + ", ".join(f"{s}://" for s in _SCHEMES))
    topology, tls = _SCHEMES[scheme.lower()]
    if topology == "single":
        try:
            parse_single_url(url)
        except ValueError as exc:
            raise ValueError(f"invalid Redis URL: {exc}") from None
        path = urlsplit(url).path.strip("/")
        if scheme.lower() != "unix" and path and not path.isdigit():
            raise ValueError("invalid Redis URL: its path must be the database number (/0)")
        return RedisTarget("single", tls=tls)
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"a {scheme}:// URL takes no query string or fragment")
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, _, password = userinfo.partition(":")
    nodes = tuple(_node(text, _DEFAULT_PORT[topology]) for text in hosts.split(","))
    segments = [s for s in parts.path.split("/") if s]
    if topology == "cluster":
        if segments not in ([], ["0"]):
            raise ValueError("a Redis Cluster URL has no path but /0: a cluster has only database 0")
        service, db = "", 0
    else:
        if not 1 <= len(segments) <= 2:
            raise ValueError("a Sentinel URL needs the service (master) name as its path: /<service>[/<db>]")
        service, db = unquote(segments[0]), _db(segments[1] if len(segments) > 1 else "0")
    return RedisTarget(
        topology, tls, nodes, service, db, unquote(username) or None, unquote(password) if password else None
    )


def _node(text: str, default_port: int) -> tuple[str, int]:
    """`host`, `host:port` or `[v6]:port` as (host, port)."""
    host, port = text, str(default_port)
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        if rest:
            if not rest.startswith(":"):
                raise ValueError("a bracketed IPv6 node must be written [address]:port")
            port = rest[1:]
    elif ":" in text:
        host, _, port = text.rpartition(":")
    if not host:
        raise ValueError("every node in the Redis URL needs a host (host:port, comma-separated)")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError("every node's port in the Redis URL must be a number from 1 to 65535")
    return host, int(port)


def _db(text: str) -> int:
    if not text.isdigit():
        raise ValueError("the database in a Sentinel URL must be a number (/<service>/<db>)")
    return int(text)


def connect(url: str, *, password: str | None, timeout: float, max_connections: int = 64) -> Redis | RedisCluster:
    """A client for the topology `url` names (see the module doc), failing fast: every connect and
    every reply waits at most `timeout` seconds, so callers can answer 503 instead of hanging.

    At most `max_connections` connections (per server of a cluster). To one server, a call that finds
    them all busy waits for one, up to `timeout` (redis-py's default pool raises at once, which turned
    a burst of more than 100 concurrent calls into errors)."""
    target = parse_url(url)
    fail_fast: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": HEALTH_CHECK_INTERVAL,
    }
    if target.topology == "single":
        pool = BlockingConnectionPool.from_url(
            url, password=password, max_connections=max_connections, timeout=timeout, **fail_fast
        )
        return Redis.from_pool(pool)
    if target.topology == "cluster":
        return RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in target.nodes],
            username=target.username,
            password=target.password or password,
            ssl=target.tls,
            max_connections=max_connections,
            **fail_fast,
        )
    return _sentinel_master(target, password=password, fail_fast=fail_fast | {"max_connections": max_connections})


def _sentinel_master(target: RedisTarget, *, password: str | None, fail_fast: dict[str, Any]) -> Redis:
    """The master of `target.service`: each new connection asks the Sentinels where it is, and a
    connection to a master that was demoted is dropped, so the client follows a failover."""
    sentinel_kwargs: dict[str, Any] = {
        "socket_timeout": fail_fast["socket_timeout"],
        "socket_connect_timeout": fail_fast["socket_connect_timeout"],
        "ssl": target.tls,
    }
    if target.password:
        sentinel_kwargs.update(username=target.username, password=target.password)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]  # redis-py leaves it untyped
        list(target.nodes), sentinel_kwargs=sentinel_kwargs, ssl=target.tls, **fail_fast
    )
    master: Redis = sentinel.master_for(target.service, redis_class=_SentinelMaster, db=target.db, password=password)
    return master


class _SentinelMaster(Redis):
    """A master client that closes its connections to the Sentinels too when it is closed."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            for sentinel in pool.sentinel_manager.sentinels:
                await sentinel.aclose()


def store_client(client: Redis | RedisCluster) -> Redis:
    """`client` as `JobStore` is annotated today (`Redis`). Sound for a `RedisCluster` too: JobStore
    calls only commands both clients have and keeps every key in one slot. Goes away once JobStore
    is annotated `Redis | RedisCluster`."""
    return cast("Redis", client)
