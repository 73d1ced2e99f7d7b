"""queue.py on fakeredis and on a real redis-server: the contract the reconciler relies on."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from tests.jobs import model
from webhook_scaler.queue import ALL, Activity, JobStore, JobUpdate, Outcome, Scope, Ttls


def upd(status: str, **kw: Any) -> JobUpdate:
    return JobUpdate.from_payload(model(status, **kw))


async def test_lifecycle_moves_through_the_demand_index(redis: Redis) -> None:
    store = JobStore(redis)
    r = await store.record(upd("queued"), now_ms=1000, delivery_id="d1")
    assert (r.outcome, r.previous, r.state) == (Outcome.APPLIED, None, "queued")
    [job] = await store.queued(ALL)
    assert (job.job_id, job.labels, job.repo, job.owner, job.queued_ms) == (
        101,
        ("ubuntu-latest",),
        "acme/widgets",
        "acme",
        1000,
    )
    assert [j.job_id for j in await store.queued(Scope("owner", "ACME"))] == [101]
    assert [j.job_id for j in await store.queued(Scope("repo", "Acme/Widgets"))] == [101]
    assert await store.queued(Scope("owner", "other")) == []
    r = await store.record(upd("in_progress"), now_ms=2000, delivery_id="d2")
    assert (r.outcome, r.previous, r.state) == (Outcome.APPLIED, "queued", "in_progress")
    assert await store.queued(ALL) == []
    r = await store.record(upd("completed"), now_ms=3000, delivery_id="d3")
    assert r.state == "completed"
    assert 0 < await redis.ttl("{grs}:job:101") <= Ttls().completed


async def test_repeated_delivery_id_changes_nothing(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"), now_ms=1, delivery_id="same")
    await store.record(upd("in_progress"), now_ms=2, delivery_id="other")
    again = await store.record(upd("queued", attempt=5), now_ms=3, delivery_id="same")
    assert again.outcome is Outcome.DUPLICATE
    assert (await store.state(101))["state"] == "in_progress"


async def test_redelivery_with_new_id_is_harmless(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"), now_ms=1, delivery_id="a")
    await store.record(upd("in_progress"), now_ms=2, delivery_id="b")
    replay = await store.record(upd("queued"), now_ms=3, delivery_id="c")
    assert replay.outcome is Outcome.STALE
    assert await store.queued(ALL) == []


async def test_completed_before_queued_stays_completed(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("completed"), now_ms=1, delivery_id="a")
    late = await store.record(upd("queued"), now_ms=2, delivery_id="b")
    assert late.outcome is Outcome.STALE
    assert await store.queued(ALL) == []


async def test_rerun_brings_a_completed_job_back(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued", attempt=0), now_ms=1)
    await store.record(upd("in_progress", attempt=1), now_ms=2)
    await store.record(upd("completed", attempt=1), now_ms=3)
    # A rerun reuses the job id; its queued event still carries the previous attempt.
    rerun = await store.record(upd("queued", attempt=1), now_ms=4)
    assert rerun.outcome is Outcome.APPLIED and rerun.previous == "completed"
    assert [j.queued_ms for j in await store.queued(ALL)] == [4]


async def test_waiting_is_recorded_but_not_demand(redis: Redis) -> None:
    store = JobStore(redis)
    r = await store.record(upd("waiting"), now_ms=1)
    assert r.state == "waiting"
    assert await store.queued(ALL) == []
    await store.record(upd("queued"), now_ms=2)
    assert len(await store.queued(ALL)) == 1


async def test_claims_are_exclusive_and_cleared_when_the_job_leaves_the_queue(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"), now_ms=1)
    results = await asyncio.gather(*(store.claim(101, holder=f"r{i}", ttl_ms=60_000) for i in range(20)))
    assert sum(results) == 1
    [job] = await store.queued(ALL)
    assert job.claimed_by is not None and job.claimed_by.startswith("r")
    await store.release(101, holder="not-the-holder")
    assert (await store.queued(ALL))[0].claimed_by == job.claimed_by
    await store.record(upd("in_progress"), now_ms=2)
    assert await redis.exists("{grs}:claim:101") == 0
    assert not await store.claim(101, holder="late", ttl_ms=60_000)


async def test_claim_expires(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"), now_ms=1)
    assert await store.claim(101, holder="a", ttl_ms=50)
    for _ in range(500):  # until Redis has expired the claim (at most 5 s), not a guess at how long that takes
        if not await redis.exists("{grs}:claim:101"):
            break
        await asyncio.sleep(0.01)
    assert await store.claim(101, holder="b", ttl_ms=50)


async def test_poll_sync_adds_missing_and_drops_gone_jobs(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued", job_id=1), now_ms=100)
    await store.record(upd("queued", job_id=2), now_ms=100)
    await store.record(upd("queued", job_id=3, repo="other/repo"), now_ms=100)
    # Gitea lists job 2 and a job 4 no webhook reported, for owner acme, polled at t=200.
    added, dropped = await store.sync_polled(
        Scope("owner", "acme"), [upd("queued", job_id=2), upd("queued", job_id=4)], polled_since_ms=200, now_ms=300
    )
    assert (added, dropped) == (1, 1)
    assert sorted(j.job_id for j in await store.queued(ALL)) == [2, 3, 4]
    assert (await store.state(1))["state"] == "gone"


async def test_poll_does_not_drop_what_a_webhook_reported_during_the_poll(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued", job_id=7), now_ms=500)
    added, dropped = await store.sync_polled(Scope("owner", "acme"), [], polled_since_ms=400, now_ms=600)
    assert (added, dropped) == (0, 0)
    assert [j.job_id for j in await store.queued(ALL)] == [7]


async def test_poll_settles_a_rerun_webhooks_cannot_tell_apart(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"), now_ms=1)
    await store.record(upd("completed", picked=False), now_ms=2)  # cancelled before pickup
    rerun = await store.record(upd("queued"), now_ms=3)  # same attempt: indistinguishable from a replay
    assert rerun.outcome is Outcome.STALE
    await store.sync_polled(Scope("repo", "acme/widgets"), [upd("queued")], polled_since_ms=10, now_ms=11)
    assert [j.job_id for j in await store.queued(ALL)] == [101]


async def test_wake_up_stream_reports_every_applied_change(redis: Redis) -> None:
    store = JobStore(redis)
    last, _ = await store.wait("0", block_ms=1)
    # From the id read so far, not "$": the waiter then sees the entry whether or not its XREAD reached
    # Redis before the record, so the test need not guess how long that takes.
    waiter = asyncio.create_task(store.wait(last, block_ms=5000))
    await store.record(upd("queued", job_id=9), now_ms=1)
    last, changes = await asyncio.wait_for(waiter, 5)
    assert changes == [(9, "queued")]
    await store.record(upd("queued", job_id=9), now_ms=2)  # stale: no entry
    await store.record(upd("in_progress", job_id=9), now_ms=3)
    _, changes = await store.wait(last, block_ms=100)
    assert changes == [(9, "in_progress")]


async def test_prefixes_separate_installations(redis: Redis) -> None:
    a, b = JobStore(redis, prefix="a"), JobStore(redis, prefix="b")
    await a.record(upd("queued"), now_ms=1)
    assert await b.queued(ALL) == []
    assert len(await a.queued(ALL)) == 1


async def test_nothing_lives_forever(redis: Redis) -> None:
    store = JobStore(redis, ttls=Ttls(job=100, completed=50, delivery=30))
    await store.record(upd("queued", job_id=1), now_ms=1, delivery_id="x")
    await store.record(upd("completed", job_id=2), now_ms=1)
    assert 0 < await redis.ttl("{grs}:job:1") <= 100
    assert 0 < await redis.ttl("{grs}:job:2") <= 50
    assert 0 < await redis.ttl("{grs}:delivery:x") <= 30
    # Index members older than the job TTL are pruned on the next write.
    await store.record(upd("queued", job_id=3), now_ms=1 + 101_000)
    assert await redis.zrange("{grs}:queued", 0, -1) == [b"3"]


async def test_busy_runners_follow_in_progress_and_completed(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"), now_ms=1)
    assert (await store.activity(["widgets-runner-7f9c2", "other"])).busy == set()
    in_progress = upd("in_progress")
    assert in_progress.runner_name
    await store.record(in_progress, now_ms=2)
    assert (await store.activity([in_progress.runner_name, "other"])).busy == {in_progress.runner_name}
    done = upd("completed")
    assert done.runner_name is None  # an ephemeral runner's completed event has no runner_name
    await store.record(done, now_ms=3)
    assert (await store.activity([in_progress.runner_name])).busy == set()
    assert (await store.state(101))["runner"] == in_progress.runner_name
    # ...and when the job it took ended, so that a runner outliving its job can be told apart
    activity = await store.activity([in_progress.runner_name, "other"])
    assert activity.busy == set() and activity.done_ms == {in_progress.runner_name: 3}


async def test_activity_says_which_jobs_are_still_queued_in_the_same_snapshot(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued", job_id=1), now_ms=1)
    await store.record(upd("queued", job_id=2), now_ms=1)
    taken = upd("in_progress", job_id=2)
    await store.record(taken, now_ms=2)
    assert taken.runner_name
    activity = await store.activity([taken.runner_name], jobs=[1, 2, 3])
    assert activity.queued == {1} and activity.busy == {taken.runner_name}
    assert (await store.activity([], jobs=[1])).queued == {1}
    assert await store.activity([]) == Activity(set(), {}, set())


async def test_a_job_picked_and_completed_leaves_one_fact_each_for_the_metrics(redis: Redis) -> None:
    store, other = JobStore(redis), JobStore(redis)
    await store.record(upd("queued"), now_ms=1_000)
    await store.record(upd("queued"), now_ms=1_500)  # a redelivery: the job still waits since 1,000
    picked = upd("in_progress")
    await store.record(picked, now_ms=4_000)
    await store.record(upd("in_progress"), now_ms=4_100)  # a duplicate changes nothing: no second fact
    await store.record(upd("completed"), now_ms=10_000)
    first = await store.observations(limit=1)
    rest = await other.observations()  # another replica takes what is left, never the same facts
    assert [(o.runner, o.kind, o.seconds) for o in first] == [(picked.runner_name, "picked", 3.0)]
    assert [(o.runner, o.kind, o.seconds, o.conclusion) for o in rest] == [
        (picked.runner_name, "completed", 6.0, "success")
    ]
    assert await store.observations() == []
    # A job cancelled before any runner took it is no runner's fact.
    await store.record(upd("queued", job_id=102), now_ms=1)
    await store.record(upd("completed", job_id=102, picked=False), now_ms=2)
    assert await store.observations() == []
