"""Fixtures shared by every test folder: real Gitea payloads and the Redis backends; and the order the
tests of each module run in (GRS_TEST_ORDER, tests/order.py)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import fakeredis
import pytest
from redis.asyncio import Redis

from reconciler.kube.crd import crd
from tests import fake_gitea
from tests.kube_cluster import KubeCluster, apply_crd
from tests.order import FIRST, VARIABLE, arranged, modules_first
from tests.redis_server import RedisServer
from tests.redis_topology import ClusterServers, SentinelServers

DATA = Path(__file__).parent / "data" / "gitea"
SECRET = "gitea-webhook-test-secret"


def pytest_report_header() -> str | None:
    order = os.environ.get(VARIABLE, "")
    return f"{VARIABLE}={order}: the tests of each module run in this order, not as written" if order else None


@pytest.fixture(autouse=True)
def gitea_answers_checked() -> Iterator[None]:
    """Every fake Gitea a test made answered as Gitea's spec says; a failed check fails the test (it was
    never turned into a 500 that the product would retry)."""
    yield
    errors = [e for fake in fake_gitea.LIVE for e in fake.errors]
    for fake in fake_gitea.LIVE:
        fake.errors.clear()
    assert not errors, "the fake Gitea answered outside Gitea's spec:\n" + "\n".join(errors)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules GRS_MODULES_FIRST names first, and reorder the tests within each module as
    GRS_TEST_ORDER says; unset, as written."""
    items[:] = modules_first(items, module=lambda item: item.path.name, first=os.environ.get(FIRST, "").split())
    try:
        items[:] = arranged(items, module=lambda item: item.path, order=os.environ.get(VARIABLE, ""))
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None


@dataclass(frozen=True)
class RecordedDelivery:
    """One of Gitea's example deliveries: the exact body bytes and the headers Gitea sends."""

    name: str
    body: bytes
    headers: dict[str, str]

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def load_deliveries() -> list[RecordedDelivery]:
    """Every delivery in tests/data/gitea/webhooks/deliveries.json."""
    index = json.loads((DATA / "webhooks" / "deliveries.json").read_text())
    return [
        RecordedDelivery(
            name=d["body_file"],
            body=(DATA / "webhooks" / d["body_file"]).read_bytes(),
            headers=dict(d["headers"]),
        )
        for d in index["deliveries"]
    ]


@pytest.fixture(scope="session")
def deliveries() -> dict[str, RecordedDelivery]:
    return {d.name: d for d in load_deliveries()}


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    server.start()
    yield server
    server.stop()


Topology = TypeVar("Topology", ClusterServers, SentinelServers)


def _running(servers: Topology) -> Iterator[Topology]:
    """Start the servers, hand them over, and stop every one of them by PID afterwards."""
    try:
        servers.start()
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterServers]:
    """A real 3-master Redis Cluster on loopback, shared by the session."""
    yield from _running(ClusterServers(tmp_path_factory.mktemp("redis-cluster")))


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelServers]:
    """A real master, replica and three Sentinels on loopback, shared by the session: no failover here."""
    yield from _running(SentinelServers(tmp_path_factory.mktemp("redis-sentinel")))


@pytest.fixture
def redis_sentinel_to_fail(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelServers]:
    """Like `redis_sentinel`, but the test's own, to break (pause the master, force a failover)."""
    yield from _running(SentinelServers(tmp_path_factory.mktemp("redis-sentinel-failover")))


@pytest.fixture(params=["fakeredis", "redis-server"])
async def redis(request: pytest.FixtureRequest) -> AsyncIterator[Redis]:
    """An empty Redis: fakeredis (with Lua), and a real redis-server."""
    if request.param == "fakeredis":
        client: Redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        client = Redis.from_url(server.url)
    await client.flushall()
    yield client
    await client.aclose()


@pytest.fixture(scope="session")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeCluster]:
    """A real etcd + kube-apiserver with the RunnerGroup CRD applied, shared by the session."""
    cluster = KubeCluster(tmp_path_factory.mktemp("kube"))
    cluster.start()
    try:
        apply_crd(cluster, crd())
        yield cluster
    finally:
        cluster.stop()


FIGURES: list[str] = []  # lines tests report, printed after the run (e.g. what a fault test measured)


@pytest.fixture
def report() -> Callable[[str], None]:
    """Print a line of figures in the summary at the end of the run (pytest captures a test's output)."""
    return FIGURES.append


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
