"""The JobStore (store/jobs/records.py) on a real 3-master Redis Cluster and through real Sentinels, and a Sentinel
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
from redis.exceptions import TimeoutError as RedisTimeoutError

from tests.jobs import claim, model, stored
from tests.redis_topology import ClusterServers, SentinelServers
from webhook_scaler.store.client import connect, store_client
from webhook_scaler.store.jobs.model import ALL, JobUpdate, Scope
from webhook_scaler.store.jobs.records import JobStore, Outcome
from webhook_scaler.store.seats.coordination import SEATS_IDLE_TTL_S, Coordination
from webhook_scaler.store.seats.model import Abandoned

Client = Redis | RedisCluster


def upd(status: str, **kw: Any) -> JobUpdate:
    return JobUpdate.from_payload(model(status, **kw))


def new_store(client: Client) -> JobStore:
    return JobStore(store_client(client), prefix=uuid.uuid4().hex[:12])


def coordination_of(store: JobStore) -> Coordination:
    return Coordination(store.redis, prefix=store.prefix)


@pytest.fixture(params=["cluster", "sentinel"])
async def client(request: pytest.FixtureRequest) -> AsyncIterator[Client]:
    """A client as `connect` builds it from the topology's URL."""
    servers: ClusterServers | SentinelServers = request.getfixturevalue(f"redis_{request.param}")
    made = connect(servers.url, password=None, timeout=2.0)
    yield made
    await made.aclose()


async def test_webhook_writes_claims_locks_and_the_stream(client: Client) -> None:
    store = new_store(client)
    first = await store.record(upd("queued", job_id=1), delivery_id="d1")
    assert (first.outcome, first.state) == (Outcome.APPLIED, "queued")
    assert (await store.record(upd("queued", job_id=1), delivery_id="d1")).outcome is Outcome.DUPLICATE
    await store.record(upd("queued", job_id=2, repo="other/repo"), delivery_id="d2")
    assert [j.job_id for j in await store.queued(ALL)] == [1, 2]
    assert [j.job_id for j in await store.queued(Scope("owner", "ACME"))] == [1]
    assert [j.job_id for j in await store.queued(Scope("repo", "other/repo"))] == [2]
    coordination = coordination_of(store)
    claims = await asyncio.gather(*(claim(coordination, 1, holder=f"r{i}", ttl_ms=60_000) for i in range(20)))
    assert sum(claims) == 1
    winner = next(f"r{i}" for i, won in enumerate(claims) if won)
    await coordination.release(1, holder=winner)
    assert await claim(coordination, 1, holder="again", ttl_ms=60_000)
    assert await coordination.lock("group", holder="a", ttl_ms=60_000)
    assert not await coordination.lock("group", holder="b", ttl_ms=60_000)
    await coordination.unlock("group", holder="a")
    assert await coordination.lock("group", holder="b", ttl_ms=60_000)
    taken = upd("in_progress", job_id=1)
    await store.record(taken, delivery_id="d3")
    await store.record(upd("completed", job_id=1), delivery_id="d4")
    assert [j.job_id for j in await store.queued(ALL)] == [2]
    _last, changes = await store.wait("0", block_ms=100)
    assert [(j, s) for j, s, _ in changes] == [(1, "queued"), (2, "queued"), (1, "in_progress"), (1, "completed")]
    assert [r for _, _, r in changes] == ["", "", taken.runner_name, taken.runner_name]
    facts = await store.observations()
    assert [(o.runner, o.kind) for o in facts] == [(taken.runner_name, "picked"), (taken.runner_name, "completed")]
    assert await store.ping()


async def test_seats_cap_a_group_and_follow_their_epoch(client: Client) -> None:
    """The seat scripts on one slot: the cap holds under a race, a lost epoch refuses, nothing is taken
    unless everything is, and a pass's start reads the seats and frees the ended ones."""
    store = new_store(client)
    coordination = coordination_of(store)
    epoch = await coordination.epoch(new_id="e1")
    # (the job's runner below has a name of its own: one of these would hold its seat already, and a take
    # is idempotent per name)
    granted = await asyncio.gather(
        *(coordination.take("g", f"runner-{i}", maximum=3, epoch="e1", taker="t") for i in range(12))
    )
    assert sorted(granted) == ["full"] * 9 + ["granted"] * 3
    held = (await coordination.seats("g")).held
    assert await coordination.take("g", "runner-x", maximum=3, epoch="another", taker="t") == "epoch"
    await store.record(upd("queued", job_id=7), delivery_id="d7")
    assert (
        await coordination.take("g", "for-job-7", maximum=3, epoch="e1", taker="t", job_id=7, claim_ttl_ms=60_000)
        == "full"
    )
    assert not await client.exists(coordination.keys.claim(7))  # full: the job was not claimed either
    ttl = await client.ttl(coordination.keys.seats("g"))  # a group gone for good leaves no seats behind
    assert 0 < ttl <= SEATS_IDLE_TTL_S
    first = sorted(held)[0]
    begun = await coordination.begin("g", lease=("p", 60_000), epoch=epoch.id, free=[first], jobs=[7])
    assert begun.seats is not None and set(begun.seats.held) == set(held) - {first}
    assert begun.activity is not None and begun.activity.queued == {7}
    assert not (await coordination.begin("g", lease=("q", 60_000), epoch=epoch.id)).leased  # p has the lease
    assert (
        await coordination.take("g", "for-job-7", maximum=3, epoch="e1", taker="r/1", job_id=7, claim_ttl_ms=60_000)
        == "granted"
    )
    assert (
        await coordination.take("g", "for-job-7-r1", maximum=3, epoch="e1", taker="r/1", job_id=7, claim_ttl_ms=60_000)
        == "claimed"
    )
    # every take renewed its taker's heartbeat; a seat whose taker's heartbeat lapsed is abandoned: silent
    # while nothing tells its taker is dead, dead once a later process of its replica beats
    assert await coordination.abandoned("g", ["for-job-7", "unknown"]) == Abandoned([], [])
    await coordination.heartbeat("r/1")
    await client.delete(coordination.keys.alive("r/1"))
    assert await coordination.abandoned("g", ["for-job-7", "unknown"]) == Abandoned([], ["for-job-7"])
    await coordination.heartbeat("r/2")
    assert await coordination.abandoned("g", ["for-job-7", "unknown"]) == Abandoned(["for-job-7"], [])
    await coordination.release_all([(7, "another-holder")])
    assert await client.exists(coordination.keys.claim(7)), "only its holder's release lets a claim go"
    await coordination.release_all([(7, "for-job-7")])
    assert not await client.exists(coordination.keys.claim(7))


async def test_activity_reads_runners_and_jobs_in_one_snapshot(client: Client) -> None:
    store = new_store(client)
    await store.record(upd("queued", job_id=1), delivery_id="d1")
    await store.record(upd("queued", job_id=2), delivery_id="d2")
    taken = upd("in_progress", job_id=2)
    await store.record(taken, delivery_id="d3")
    assert taken.runner_name
    activity = await coordination_of(store).activity([taken.runner_name, "idle"], jobs=[1, 2, 3])
    assert activity.busy == {taken.runner_name} and activity.queued == {1}


async def test_the_poll_adds_missing_and_drops_gone_jobs(client: Client) -> None:
    """The poll path: `record` without a delivery id, a plain pipeline, and the drop script."""
    store = new_store(client)
    await store.record(upd("queued", job_id=1), delivery_id="d1")
    await store.record(upd("queued", job_id=2), delivery_id="d2")
    listed = [upd("queued", job_id=2), upd("queued", job_id=4)]
    for expected in ((1, 0), (0, 1)):  # gone at the second complete listing that misses it
        since = await store.now_ms()
        assert await store.sync_polled(Scope("owner", "acme"), listed, polled_since_ms=since, complete=True) == expected
    assert sorted(j.job_id for j in await store.queued(ALL)) == [2, 4]
    assert (await stored(store.redis, 1, prefix=store.prefix))["state"] == "gone"


WRITERS, JOBS_EACH = 16, 25


async def _record_until_stored(store: JobStore, job_id: int, retries: Counter[str]) -> Outcome:
    """A webhook sender that retries on connection errors, with the same delivery id, as Gitea does."""
    deadline = time.monotonic() + 60
    while True:
        try:
            result = await store.record(upd("queued", job_id=job_id), delivery_id=f"d{job_id}")
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
        assert Counter(changes) == Counter((j, "queued", "") for j in everyone)  # each applied exactly once
        for job_id in sorted(everyone):  # one job at a time: 3 replicas race for it
            claims = await asyncio.gather(
                *(claim(coordination_of(store), job_id, holder=f"r{i}", ttl_ms=60_000) for i in range(3))
            )
            assert sum(claims) == 1, job_id
    finally:
        await client.aclose()
