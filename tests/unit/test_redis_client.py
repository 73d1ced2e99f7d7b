"""GRS_REDIS_URL: the three topologies' URL forms, refused clearly at startup when unusable."""

from __future__ import annotations

import pytest
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import SentinelConnectionPool

from reconciler.settings import Settings as ReconcilerSettings
from webhook_scaler.config import ConfigError, load
from webhook_scaler.store.client import RedisTarget, connect, parse_url


@pytest.mark.parametrize(
    ("url", "target"),
    [
        ("redis://localhost:6379/0", RedisTarget("single")),
        ("rediss://:pw@redis.example:6380/2", RedisTarget("single", tls=True)),
        ("unix:///run/redis.sock?db=1", RedisTarget("single")),
        ("redis+cluster://a:7000,b:7001", RedisTarget("cluster", nodes=(("a", 7000), ("b", 7001)))),
        ("rediss+cluster://u:p@a/0", RedisTarget("cluster", True, (("a", 6379),), username="u", password="p")),
        ("redis+cluster://[::1]:7000", RedisTarget("cluster", nodes=(("::1", 7000),))),
        (
            "redis+sentinel://s1,s2:26380/mymaster/3",
            RedisTarget("sentinel", nodes=(("s1", 26379), ("s2", 26380)), service="mymaster", db=3),
        ),
        (
            "redis+sentinel://:sentinel-pw@s1:26379/mymaster",
            RedisTarget("sentinel", nodes=(("s1", 26379),), service="mymaster", password="sentinel-pw"),
        ),
    ],
)
def test_each_topology_has_its_url(url: str, target: RedisTarget) -> None:
    assert parse_url(url) == target


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("localhost:6379", "must start with one of"),
        ("http://:pw@localhost", "must start with one of"),
        ("redis://:pw@localhost/x", "invalid Redis URL"),
        ("redis+cluster://:pw@a:70000", "port"),
        ("redis+cluster://:pw@a:1,,b:2", "needs a host"),
        ("redis+cluster://:pw@a:1/2", "only database 0"),
        ("redis+cluster://:pw@a:1?ssl=true", "no query string"),
        ("redis+sentinel://:pw@s1:26379", "service"),
        ("redis+sentinel://:pw@s1:26379/m/x", "must be a number"),
        ("redis+sentinel://:pw@s1:26379/m/1/2", "service"),
    ],
)
def test_a_bad_url_is_refused_at_startup_without_echoing_it(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as err:
        parse_url(url)
    assert "pw" not in str(err.value)
    for model in (ReconcilerSettings,):
        with pytest.raises(ConfigError, match="GRS_REDIS_URL") as config_err:
            load(model, {"GRS_REDIS_URL": url})
        assert problem in str(config_err.value) and "pw" not in str(config_err.value)


async def test_connect_builds_the_client_the_url_names() -> None:
    single = connect("redis://127.0.0.1:1/0", password="pw", timeout=0.5)
    cluster = connect("redis+cluster://127.0.0.1:1,127.0.0.1:2", password="pw", timeout=0.5)
    sentinel = connect("redis+sentinel://127.0.0.1:1/mymaster/2", password="pw", timeout=0.5)
    assert type(single) is Redis and isinstance(cluster, RedisCluster)
    # A burst waits for a free connection rather than failing with "Too many connections".
    assert isinstance(single.connection_pool, BlockingConnectionPool)
    assert single.connection_pool.max_connections == 64 and single.connection_pool.timeout == 0.5
    assert isinstance(sentinel, Redis) and isinstance(sentinel.connection_pool, SentinelConnectionPool)
    assert sentinel.connection_pool.service_name == "mymaster"
    assert sentinel.connection_pool.connection_kwargs["db"] == 2
    assert sentinel.connection_pool.connection_kwargs["socket_timeout"] == 0.5
    for client in (single, cluster, sentinel):
        await client.aclose()
