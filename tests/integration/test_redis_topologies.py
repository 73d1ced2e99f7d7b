"""queue.py's JobStore on a real 3-master Redis Cluster and through real Sentinels, and a Sentinel
failover in the middle of a burst of webhook writes: nothing lost, nothing doubled, one claim winner.

Each test uses its own key prefix, so the shared topologies need no flush between tests.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.jobs import model
from tests.redis_topology import ClusterServers, SentinelServers
from webhook_scaler.queue import ALL, JobStore, JobUpdate, Outcome, Scope
from webhook_scaler.redis_client import connect, store_client

Client = Redis | RedisCluster
ON_CLUSTER_MGET = pytest.mark.xfail(
    strict=True,
    raises=RedisClusterException,
    reason=(
        "JobStore.activity queues MGET in its transaction pipeline; redis-py's ClusterPipeline refuses "
        "MGET even when every key is in one slot (RedisClusterException: Calling pipelined function mget "
        "is blocked when running redis in cluster mode)"
    ),
)
ON_CLUSTER_EMPTY_KEY = pytest.mark.xfail(
    strict=True,
    raises=RedisClusterException,
    reason=(
        "JobStore.record without a delivery id passes '' as KEYS[2]; '' hashes to slot 0, not the "
        "{prefix} slot (RedisClusterException: EVALSHA - all keys must map to the same key slot)"
    ),
)


def upd(status: str, **kw: Any) -> JobUpdate:
    return JobUpdate.from_payload(model(status, **kw))


def new_store(client: Client) -> JobStore:
    return JobStore(store_client(client), prefix=uuid.uuid4().hex[:12])


@pytest.fixture(params=["cluster", "sentinel"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """A client as `connect` builds it from the topology's URL."""
    servers: ClusterServers | SentinelServers = request.getfixturevalue(f"redis_{request.param}")
    made = connect(servers.url, password=None, timeout=2.0)
    yield made
    await made.aclose()


async def test_webhook_writes_claims_locks_and_the_stream(client: Client) -> None:
    store = new_store(client)
    first = await store.record(upd("queued", job_id=1), now_ms=1, delivery_id="d1")
    assert (first.outcome, first.state) == (Outcome.APPLIED, "queued")
    assert (await store.record(upd("queued", job_id=1), now_ms=2, delivery_id="d1")).outcome is Outcome.DUPLICATE
    await store.record(upd("queued", job_id=2, repo="other/repo"), now_ms=3, delivery_id="d2")
    assert [j.job_id for j in await store.queued(ALL)] == [1, 2]
    assert [j.job_id for j in await store.queued(Scope("owner", "ACME"))] == [1]
    assert [j.job_id for j in await store.queued(Scope("repo", "other/repo"))] == [2]
    claims = await asyncio.gather(*(store.claim(1, holder=f"r{i}", ttl_ms=60_000) for i in range(20)))
    assert sum(claims) == 1
    winner = next(f"r{i}" for i, won in enumerate(claims) if won)
    await store.release(1, holder=winner)
    assert await store.claim(1, holder="again", ttl_ms=60_000)
    assert await store.lock("group", holder="a", ttl_ms=60_000)
    assert not await store.lock("group", holder="b", ttl_ms=60_000)
    await store.unlock("group", holder="a")
    assert await store.lock("group", holder="b", ttl_ms=60_000)
    taken = upd("in_progress", job_id=1)
    await store.record(taken, now_ms=4, delivery_id="d3")
    await store.record(upd("completed", job_id=1), now_ms=9, delivery_id="d4")
    assert [j.job_id for j in await store.queued(ALL)] == [2]
    _last, changes = await store.wait("0", block_ms=100)
    assert changes == [(1, "queued"), (2, "queued"), (1, "in_progress"), (1, "completed")]
    facts = await store.observations()
    assert [(o.runner, o.kind) for o in facts] == [(taken.runner_name, "picked"), (taken.runner_name, "completed")]
    assert await store.ping()


async def test_runner_jobs_created_lately_are_shared(client: Client) -> None:
    """`note_created` is a MULTI/EXEC pipeline; on a cluster it runs on the node of the one slot."""
    store = new_store(client)
    await store.note_created("g", "runner-a", now_ms=1_000, window_ms=5_000)
    await store.note_created("g", "runner-b", now_ms=7_000, window_ms=5_000)
    assert await store.recently_created("g", since_ms=0) == {"runner-b"}


@pytest.mark.parametrize("client", [pytest.param("cluster", marks=ON_CLUSTER_MGET), "sentinel"], indirect=True)
async def test_activity_reads_runners_and_jobs_in_one_snapshot(client: Client) -> None:
    store = new_store(client)
    await store.record(upd("queued", job_id=1), now_ms=1, delivery_id="d1")
    await store.record(upd("queued", job_id=2), now_ms=1, delivery_id="d2")
    taken = upd("in_progress", job_id=2)
    await store.record(taken, now_ms=2, delivery_id="d3")
    assert taken.runner_name
    activity = await store.activity([taken.runner_name, "idle"], jobs=[1, 2, 3])
    assert activity.busy == {taken.runner_name} and activity.queued == {1}


@pytest.mark.parametrize("client", [pytest.param("cluster", marks=ON_CLUSTER_EMPTY_KEY), "sentinel"], indirect=True)
async def test_the_poll_adds_missing_and_drops_gone_jobs(client: Client) -> None:
    """The poll path: `record` without a delivery id, a plain pipeline, and the drop script."""
    store = new_store(client)
    await store.record(upd("queued", job_id=1), now_ms=100, delivery_id="d1")
    await store.record(upd("queued", job_id=2), now_ms=100, delivery_id="d2")
    added, dropped = await store.sync_polled(
        Scope("owner", "acme"), [upd("queued", job_id=2), upd("queued", job_id=4)], polled_since_ms=200, now_ms=300
    )
    assert (added, dropped) == (1, 1)
    assert sorted(j.job_id for j in await store.queued(ALL)) == [2, 4]
    assert (await store.state(1))["state"] == "gone"


async def test_the_poll_drops_gone_jobs_without_new_ones(client: Client) -> None:
    """What of the poll path works on a cluster today: the plain pipeline and the drop script."""
    store = new_store(client)
    await store.record(upd("queued", job_id=1), now_ms=100, delivery_id="d1")
    added, dropped = await store.sync_polled(Scope("owner", "acme"), [], polled_since_ms=200, now_ms=300)
    assert (added, dropped) == (0, 1)
    assert await store.queued(ALL) == []


WRITERS, JOBS_EACH = 16, 25


async def _record_until_stored(store: JobStore, job_id: int, retries: Counter[str]) -> Outcome:
    """A webhook sender that retries on connection errors, with the same delivery id, as Gitea does."""
    deadline = time.monotonic() + 60
    while True:
        try:
            result = await store.record(upd("queued", job_id=job_id), now_ms=job_id, delivery_id=f"d{job_id}")
            return result.outcome
        except (RedisConnectionError, RedisTimeoutError) as exc:
            retries[type(exc).__name__] += 1
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_a_sentinel_failover_during_a_burst_loses_and_doubles_nothing(
    redis_sentinel_to_fail: SentinelServers,
) -> None:
    servers = redis_sentinel_to_fail
    old_master = servers.master_port()
    client = connect(servers.url, password=None, timeout=1.0)
    store = JobStore(store_client(client))
    retries: Counter[str] = Counter()
    recorded: list[int] = []
    quarter_done = asyncio.Event()

    async def writer(first: int) -> None:
        for job_id in range(first, first + JOBS_EACH):
            assert await _record_until_stored(store, job_id, retries) in (Outcome.APPLIED, Outcome.DUPLICATE)
            recorded.append(job_id)
            if len(recorded) >= WRITERS * JOBS_EACH // 4:
                quarter_done.set()
            await asyncio.sleep(0.02)

    try:
        burst = [asyncio.create_task(writer(1 + w * JOBS_EACH)) for w in range(WRITERS)]
        await quarter_done.wait()
        servers.processes.pause(old_master)  # hangs mid-burst, as a stuck master does; stays stopped
        await asyncio.gather(*burst)
        assert servers.master_port() != old_master
        assert sum(retries.values()) > 0  # the burst did run into the failover
        everyone = set(range(1, WRITERS * JOBS_EACH + 1))
        queued = [j.job_id for j in await store.queued(ALL)]
        assert len(queued) == len(everyone) and set(queued) == everyone
        _last, changes = await store.wait("0", block_ms=100)
        assert Counter(changes) == Counter((j, "queued") for j in everyone)  # each applied exactly once
        for job_id in sorted(everyone):  # one job at a time: 3 replicas race for it
            claims = await asyncio.gather(*(store.claim(job_id, holder=f"r{i}", ttl_ms=60_000) for i in range(3)))
            assert sum(claims) == 1, job_id
    finally:
        await client.aclose()
