"""demand.py on a real redis-server (and fakeredis): every group sees its own oldest queued jobs, however
many jobs are queued before them."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from redis.asyncio import Redis

from reconciler.decide.assign import GroupIndex, GroupView, index_groups
from reconciler.loop.rounds.demand import Demand, Queues, window
from reconciler.model.labels import effective_labels, names
from tests.groups import spec
from tests.jobs import claim, model
from tests.redis_server import RedisServer
from webhook_scaler.store.jobs.model import JobUpdate, Scope
from webhook_scaler.store.jobs.records import JobStore
from webhook_scaler.store.seats.coordination import Coordination


def group(name: str, **kw: Any) -> GroupView:
    s = spec(**{"scope": "repo", "repo": f"acme/{name}", "labels": ["k8s"]} | kw)
    return GroupView("ci", name, s, names(effective_labels(s.labels, s.default_labels)))


async def queue(store: JobStore, ids: range, *, repo: str, labels: list[str] | None = None, at_once: int = 1) -> None:
    """Record `ids` queued, `at_once` at a time (jobs recorded together may share a millisecond: the
    index then orders them by id as text)."""
    for at in range(ids.start, ids.stop, at_once):
        chunk = range(at, min(at + at_once, ids.stop))
        updates = [
            JobUpdate.from_payload(model("queued", job_id=i, repo=repo, labels=labels or ["k8s"])) for i in chunk
        ]
        await asyncio.gather(*(store.record(u) for u in updates))


def ids(demand: Any) -> list[int]:
    return [j.job_id for j in demand.jobs]


async def test_a_job_queued_behind_ten_thousand_that_no_group_runs_now_is_seen_at_once(
    redis_server: RedisServer,
) -> None:
    # 10,100 older jobs: labels no group serves, and a group held at maxActiveRunners 1 with 100 queued.
    # Reading the oldest 10,000 of all (as rounds did) never reached the job of group "b".
    redis = Redis.from_url(redis_server.url)
    await redis.flushall()
    store = JobStore(redis)
    await queue(store, range(1, 10_001), repo="acme/a", labels=["gpu-nobody-has"], at_once=500)
    await queue(store, range(10_001, 10_101), repo="acme/a", at_once=500)  # ids of 5 digits
    await queue(store, range(20_000, 20_001), repo="acme/b")
    index = index_groups([group("a", maxActiveRunners=1), group("b")])
    reader = Demand(store)
    demand = await reader.read(index)
    assert reader.unmatched == 10_000  # the jobs whose labels no group serves
    assert ids(demand[("ci", "b")]) == [20_000]
    assert demand[("ci", "b")].total == 1
    assert ids(demand[("ci", "a")]) == list(range(10_001, 10_001 + window(index.groups[0].spec)))
    assert demand[("ci", "a")].total == 100
    await redis.aclose()


async def test_each_round_sees_claims_and_departures_and_keeps_unchanged_jobs(redis: Redis) -> None:
    store = JobStore(redis)
    # Ids of two digits: jobs recorded in one millisecond are ordered by id as text, and so by number.
    await queue(store, range(11, 41), repo="acme/a")
    index: GroupIndex = index_groups([group("a", maxActiveRunners=2), group("idle")])
    reader = Demand(store)
    first = (await reader.read(index))[("ci", "a")]
    assert (ids(first), first.total) == (list(range(11, 25)), 30)  # a window of 2 x 2 + 10
    assert ("ci", "idle") not in await reader.read(index)
    assert await claim(Coordination(redis), 11, holder="a-1-1", ttl_ms=60_000)
    await store.record(JobUpdate.from_payload(model("in_progress", job_id=12, repo="acme/a")))
    second = (await reader.read(index))[("ci", "a")]
    assert (ids(second), second.total) == ([11, *range(13, 26)], 29)
    assert second.jobs[0].claimed_by == "a-1-1"
    assert second.jobs[1] is first.jobs[2]  # unchanged: the same object, so an unchanged group skips its pass
    moved = index_groups([group("a", maxActiveRunners=2, labels=["other"]), group("z")])
    assert await reader.read(moved) == {}  # the groups changed: every job is assigned again


@pytest.mark.parametrize("queued", [0, 3])
async def test_a_group_without_matching_jobs_has_no_entry(redis: Redis, queued: int) -> None:
    store = JobStore(redis)
    await queue(store, range(1, 1 + queued), repo="acme/elsewhere")
    assert await Demand(store).read(index_groups([group("a")])) == {}


async def test_doubted_jobs_never_crowd_a_believed_one_out_of_its_groups_window(redis: Redis) -> None:
    """Replayed deliveries recorded as `aged` (maybe replays, until a poll lists them) take a window of
    their own: a job queued after more of them than a group's window still reaches its group, and a
    doubted job the poll confirms is read again in the round after."""
    store = JobStore(redis)
    size = window(spec(maxActiveRunners=1))  # 12
    for job_id in range(11, 11 + size + 5):
        aged = dataclasses.replace(
            JobUpdate.from_payload(model("queued", job_id=job_id, repo="acme/a", labels=["k8s"])), aged=True
        )
        await store.record(aged)
    await queue(store, range(90, 91), repo="acme/a")
    index = index_groups([group("a", maxActiveRunners=1)])
    reader = Demand(store)
    demand = (await reader.read(index))[("ci", "a")]
    assert ids(demand) == [*range(11, 11 + size), 90] and demand.total == size + 6
    listed = [JobUpdate.from_payload(model("queued", job_id=11, repo="acme/a", labels=["k8s"]))]
    await store.sync_polled(Scope("repo", "acme/a"), listed, polled_since_ms=await store.now_ms(), complete=False)
    again = (await reader.read(index))[("ci", "a")]
    assert [j.job_id for j in again.jobs if not j.unconfirmed] == [11, 90]


async def test_facts_about_a_runner_count_only_from_the_gitea_its_group_serves(redis: Redis) -> None:
    """A webhook of another Gitea instance naming a runner of ours (its names are not secret there)
    adds nothing to that runner's group's metrics."""
    store = JobStore(redis)
    queues = Queues(store, {"second": "https://second.example"})
    done = JobUpdate.from_payload(model("completed", job_id=5, repo="acme/a"))
    for instance in ("", "second"):
        await store.of(instance).record(dataclasses.replace(done, runner_name="a-5-1.cafe0123"))
    await queues.read([("ci", "a", group("a").spec)])
    facts = await queues.observations({"a-5-1.cafe0123": ("ci", "a")})
    assert [(key, fact.kind) for key, fact in facts] == [(("ci", "a"), "completed")]
    assert await store.of("second").observations() == []  # taken, and dropped
