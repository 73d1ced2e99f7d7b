"""The job records (store/jobs/records.py) on fakeredis and on a real redis-server: the contract the
reconciler relies on."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any, cast

from redis.asyncio import Redis

from tests.jobs import claim, model, stored
from webhook_scaler.store.jobs.model import ALL, JobUpdate, Scope
from webhook_scaler.store.jobs.records import JobStore, Outcome, Ttls
from webhook_scaler.store.keys import text
from webhook_scaler.store.seats.coordination import Coordination
from webhook_scaler.store.seats.model import Activity


def upd(status: str, **kw: Any) -> JobUpdate:
    return JobUpdate.from_payload(model(status, **kw))


async def test_lifecycle_moves_through_the_demand_index(redis: Redis) -> None:
    store = JobStore(redis)
    before = await store.now_ms()
    r = await store.record(upd("queued"), delivery_id="d1")
    after = await store.now_ms()
    assert (r.outcome, r.previous, r.state) == (Outcome.APPLIED, None, "queued")
    [job] = await store.queued(ALL)
    assert (job.job_id, job.labels, job.repo, job.owner) == (101, ("ubuntu-latest",), "acme/widgets", "acme")
    assert before <= job.queued_ms <= after  # Redis' clock, not the caller's
    assert [j.job_id for j in await store.queued(Scope("owner", "ACME"))] == [101]
    assert [j.job_id for j in await store.queued(Scope("repo", "Acme/Widgets"))] == [101]
    assert await store.queued(Scope("owner", "other")) == []
    r = await store.record(upd("in_progress"), delivery_id="d2")
    assert (r.outcome, r.previous, r.state) == (Outcome.APPLIED, "queued", "in_progress")
    assert await store.queued(ALL) == []
    r = await store.record(upd("completed"), delivery_id="d3")
    assert r.state == "completed"
    assert 0 < await redis.ttl("{grs}:job:101") <= Ttls().completed


async def test_repeated_delivery_id_changes_nothing(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"), delivery_id="same")
    await store.record(upd("in_progress"), delivery_id="other")
    again = await store.record(upd("queued", attempt=5), delivery_id="same")
    assert again.outcome is Outcome.DUPLICATE
    assert (await stored(redis, 101))["state"] == "in_progress"


async def test_redelivery_with_new_id_is_harmless(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"), delivery_id="a")
    await store.record(upd("in_progress"), delivery_id="b")
    replay = await store.record(upd("queued"), delivery_id="c")
    assert replay.outcome is Outcome.STALE
    assert await store.queued(ALL) == []


async def test_completed_before_queued_stays_completed(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("completed"), delivery_id="a")
    late = await store.record(upd("queued"), delivery_id="b")
    assert late.outcome is Outcome.STALE
    assert await store.queued(ALL) == []


async def test_rerun_brings_a_completed_job_back(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued", attempt=0))
    await store.record(upd("in_progress", attempt=1))
    await store.record(upd("completed", attempt=1))
    # A rerun reuses the job id; its queued event still carries the previous attempt.
    first_queued = int((await stored(redis, 101))["updated_ms"])
    rerun = await store.record(upd("queued", attempt=1))
    assert rerun.outcome is Outcome.APPLIED and rerun.previous == "completed"
    assert [j.attempt for j in await store.queued(ALL)] == [1]
    assert (await store.queued(ALL))[0].queued_ms >= first_queued


async def test_waiting_is_recorded_but_not_demand(redis: Redis) -> None:
    store = JobStore(redis)
    r = await store.record(upd("waiting"))
    assert r.state == "waiting"
    assert await store.queued(ALL) == []
    await store.record(upd("waiting", job_id=102))
    assert await store.waiting_count() == 2  # what "why is my job waiting" reports as held in Gitea
    await store.record(upd("queued"))
    assert len(await store.queued(ALL)) == 1
    assert await store.waiting_count() == 1
    await store.record(upd("completed", job_id=102))  # cancelled while it waited
    assert await store.waiting_count() == 0


async def test_claims_are_exclusive_and_cleared_when_the_job_leaves_the_queue(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"))
    results = await asyncio.gather(*(claim(Coordination(redis), 101, holder=f"r{i}", ttl_ms=60_000) for i in range(20)))
    assert sum(results) == 1
    [job] = await store.queued(ALL)
    assert job.claimed_by is not None and job.claimed_by.startswith("r")
    await Coordination(redis).release(101, holder="not-the-holder")
    assert (await store.queued(ALL))[0].claimed_by == job.claimed_by
    await store.record(upd("in_progress"))
    assert await redis.exists("{grs}:claim:101") == 0
    assert not await claim(Coordination(redis), 101, holder="late", ttl_ms=60_000)


async def test_claim_expires(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"))
    assert await claim(Coordination(redis), 101, holder="a", ttl_ms=50)
    for _ in range(500):  # until Redis has expired the claim (at most 5 s), not a guess at how long that takes
        if not await redis.exists("{grs}:claim:101"):
            break
        await asyncio.sleep(0.01)
    assert await claim(Coordination(redis), 101, holder="b", ttl_ms=50)


async def test_a_claim_is_made_to_last_only_by_its_holder(redis: Redis) -> None:
    await JobStore(redis).record(upd("queued"))
    coordination = Coordination(redis)
    assert await claim(coordination, 101, holder="a", ttl_ms=30_000)
    await coordination.confirm([(101, "b")], ttl_ms=300_000)  # not the holder: nothing changes
    assert 0 < await redis.pttl("{grs}:claim:101") <= 30_000
    await coordination.confirm([(101, "a"), (102, "a")], ttl_ms=300_000)  # 102: no claim, none made
    assert await redis.pttl("{grs}:claim:101") > 30_000
    assert await redis.exists("{grs}:claim:102") == 0


async def test_poll_sync_adds_missing_and_drops_gone_jobs(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued", job_id=1))
    await store.record(upd("queued", job_id=2))
    await store.record(upd("queued", job_id=3, repo="other/repo"))
    # Gitea lists job 2 and a job 4 no webhook reported, for owner acme.
    listed = [upd("queued", job_id=2), upd("queued", job_id=4)]
    since = await store.now_ms()
    added, dropped = await store.sync_polled(Scope("owner", "acme"), listed, polled_since_ms=since, complete=True)
    assert (added, dropped) == (1, 0)  # job 1 missed once: not gone yet
    assert sorted(j.job_id for j in await store.queued(ALL)) == [1, 2, 3, 4]
    since = await store.now_ms()
    added, dropped = await store.sync_polled(Scope("owner", "acme"), listed, polled_since_ms=since, complete=True)
    assert (added, dropped) == (0, 1)  # missed by two complete listings in a row
    assert sorted(j.job_id for j in await store.queued(ALL)) == [2, 3, 4]
    assert (await stored(redis, 1))["state"] == "gone"


async def test_a_job_is_gone_only_after_two_complete_listings_in_a_row_miss_it(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued", job_id=1))
    scope = Scope("owner", "acme")

    async def poll(listed: list[JobUpdate], *, complete: bool = True) -> int:
        since = await store.now_ms()
        return (await store.sync_polled(scope, listed, polled_since_ms=since, complete=complete))[1]

    assert await poll([]) == 0  # missed once
    assert await poll([upd("queued", job_id=1)]) == 0  # listed again: the count starts over
    assert await poll([]) == 0
    assert await poll([], complete=False) == 0  # an incomplete listing proves nothing
    assert [j.job_id for j in await store.queued(ALL)] == [1]
    assert await poll([]) == 1
    assert await store.queued(ALL) == []


async def test_a_queued_job_remembers_when_the_latest_poll_listing_it_began(redis: Redis) -> None:
    store = JobStore(redis)
    scope = Scope("owner", "acme")
    await store.record(upd("queued", job_id=1))  # a webhook: no poll listed it yet
    await store.sync_polled(scope, [upd("queued", job_id=2)], polled_since_ms=1_000, complete=True)
    assert {j.job_id: j.listed_ms for j in await store.queued(ALL)} == {1: None, 2: 1_000}
    listed = [upd("queued", job_id=1), upd("queued", job_id=2)]
    await store.sync_polled(scope, listed, polled_since_ms=2_000, complete=True)  # nothing else changes
    assert {j.job_id: j.listed_ms for j in await store.queued(ALL)} == {1: 2_000, 2: 2_000}


async def test_an_aged_job_is_unconfirmed_until_a_poll_lists_it_and_a_later_record_clears_the_mark(
    redis: Redis,
) -> None:
    """A `queued` the receiver took for a possible replay (`aged`) is recorded and read back as such;
    a listing of it by a poll confirms it, and any later record rewrites the job without the mark."""
    store = JobStore(redis)
    scope = Scope("owner", "acme")
    await store.record(dataclasses.replace(upd("queued", job_id=1), aged=True), delivery_id="d1")
    await store.record(upd("queued", job_id=2))
    assert {j.job_id: (j.aged, j.unconfirmed) for j in await store.queued(ALL)} == {
        1: (True, True),
        2: (False, False),
    }
    since = await store.now_ms()
    await store.sync_polled(scope, [upd("queued", job_id=1)], polled_since_ms=since, complete=True)
    (confirmed, _) = await store.queued(ALL)
    assert (confirmed.job_id, confirmed.aged, confirmed.listed_ms, confirmed.unconfirmed) == (1, True, since, False)
    rerun = dataclasses.replace(upd("queued", job_id=1, attempt=1), aged=True)
    assert (await store.record(rerun)).outcome is Outcome.APPLIED  # a later attempt: doubted afresh
    assert (await store.queued(ALL))[0].unconfirmed
    await store.record(upd("in_progress", job_id=1, attempt=2))
    assert await redis.hget("{grs}:job:1", "aged") is None


async def test_poll_does_not_drop_what_a_webhook_reported_during_the_poll(redis: Redis) -> None:
    store = JobStore(redis)
    since = await store.now_ms()
    await store.sync_polled(Scope("owner", "acme"), [], polled_since_ms=since, complete=True)
    await store.record(upd("queued", job_id=7))  # a webhook while the next poll runs
    added, dropped = await store.sync_polled(Scope("owner", "acme"), [], polled_since_ms=since, complete=True)
    assert (added, dropped) == (0, 0)
    assert [j.job_id for j in await store.queued(ALL)] == [7]


async def test_poll_settles_a_rerun_webhooks_cannot_tell_apart(redis: Redis) -> None:
    store = JobStore(redis)
    await store.record(upd("queued"))
    await store.record(upd("completed", picked=False))  # cancelled before pickup
    rerun = await store.record(upd("queued"))  # same attempt: indistinguishable from a replay
    assert rerun.outcome is Outcome.STALE
    since = await store.now_ms() + 1  # a poll that began after the stale record
    await store.sync_polled(Scope("repo", "acme/widgets"), [upd("queued")], polled_since_ms=since, complete=True)
    assert [j.job_id for j in await store.queued(ALL)] == [101]


async def test_wake_up_stream_reports_every_applied_change(redis: Redis) -> None:
    store = JobStore(redis)
    last, _ = await store.wait("0", block_ms=1)
    # From the id read so far, not "$": the waiter then sees the entry whether or not its XREAD reached
    # Redis before the record, so the test need not guess how long that takes.
    waiter = asyncio.create_task(store.wait(last, block_ms=5000))
    await store.record(upd("queued", job_id=9))
    last, changes = await asyncio.wait_for(waiter, 5)
    assert changes == [(9, "queued", "")]
    await store.record(upd("queued", job_id=9))  # stale: no entry
    taken = upd("in_progress", job_id=9)
    await store.record(taken)
    _, changes = await store.wait(last, block_ms=100)
    assert changes == [(9, "in_progress", taken.runner_name)]  # names the runner: its group looks again


async def test_prefixes_separate_installations(redis: Redis) -> None:
    a, b = JobStore(redis, prefix="a"), JobStore(redis, prefix="b")
    await a.record(upd("queued"))
    assert await b.queued(ALL) == []
    assert len(await a.queued(ALL)) == 1


async def test_each_gitea_instance_has_its_own_jobs_and_a_poll_of_one_drops_nothing_of_another(redis: Redis) -> None:
    """Job ids are numbered per instance: job 7 of the default instance and job 7 of `second` are two
    jobs, each with its own record, claim and index; a complete listing of the default instance that
    does not show job 7 marks only its own job 7 gone."""
    default, second = JobStore(redis), JobStore(redis).of("second")
    await default.record(upd("queued", job_id=7, labels=["a"]))
    await second.record(upd("queued", job_id=7, labels=["b"]))
    assert [j.labels for j in await default.queued(ALL)] == [("a",)]
    assert [j.labels for j in await second.queued(ALL)] == [("b",)]
    assert await claim(Coordination(redis).of("second"), 7, holder="runner-b", ttl_ms=60_000)
    assert await claim(Coordination(redis), 7, holder="runner-a", ttl_ms=60_000)
    for _ in range(2):
        await default.sync_polled(ALL, [], polled_since_ms=await default.now_ms() + 1, complete=True)
    assert await default.queued(ALL) == []
    assert [(j.job_id, j.claimed_by) for j in await second.queued(ALL)] == [(7, "runner-b")]
    assert (await stored(redis, 7))["state"] == "gone"
    assert {text(k) for k in await redis.keys("{grs}:i:second:*")} == {
        "{grs}:i:second:job:7",
        "{grs}:i:second:claim:7",
        "{grs}:i:second:queued",
        "{grs}:i:second:queued:owner:acme",
        "{grs}:i:second:queued:repo:acme/widgets",
    }


async def test_nothing_lives_forever(redis: Redis) -> None:
    store = JobStore(redis, ttls=Ttls(job=100, completed=50, delivery=30))
    await store.record(upd("queued", job_id=1), delivery_id="x")
    await store.record(upd("completed", job_id=2))
    assert 0 < await redis.ttl("{grs}:job:1") <= 100
    assert 0 < await redis.ttl("{grs}:job:2") <= 50
    assert 0 < await redis.ttl("{grs}:delivery:x") <= 30
    # Index members older than the job TTL are pruned on the next write.
    await redis.zadd("{grs}:queued", {"1": 1})  # queued at the start of 1970
    await store.record(upd("queued", job_id=3))
    assert await redis.zrange("{grs}:queued", 0, -1) == [b"3"]


async def test_busy_runners_follow_in_progress_and_completed(redis: Redis) -> None:
    store, coordination = JobStore(redis), Coordination(redis)
    await store.record(upd("queued"))
    assert (await coordination.activity(["widgets-runner-7f9c2", "other"])).busy == set()
    in_progress = upd("in_progress")
    assert in_progress.runner_name
    await store.record(in_progress)
    assert (await coordination.activity([in_progress.runner_name, "other"])).busy == {in_progress.runner_name}
    done = upd("completed")
    assert done.runner_name is None  # an ephemeral runner's completed event has no runner_name
    await store.record(done)
    assert (await coordination.activity([in_progress.runner_name])).busy == set()
    assert (await stored(redis, 101))["runner"] == in_progress.runner_name
    # ...and when the job it took ended, so that a runner outliving its job can be told apart
    activity = await coordination.activity([in_progress.runner_name, "other"])
    completed_ms = int((await stored(redis, 101))["updated_ms"])
    assert activity.busy == set() and activity.done_ms == {in_progress.runner_name: completed_ms}


async def test_activity_says_which_jobs_are_still_queued_in_the_same_snapshot(redis: Redis) -> None:
    store, coordination = JobStore(redis), Coordination(redis)
    await store.record(upd("queued", job_id=1))
    await store.record(upd("queued", job_id=2))
    taken = upd("in_progress", job_id=2)
    await store.record(taken)
    assert taken.runner_name
    activity = await coordination.activity([taken.runner_name], jobs=[1, 2, 3])
    assert activity.queued == {1} and activity.busy == {taken.runner_name}
    assert (await coordination.activity([], jobs=[1])).queued == {1}
    assert await coordination.activity([]) == Activity(set(), {}, set())


async def test_a_job_picked_and_completed_leaves_one_fact_each_for_the_metrics(redis: Redis) -> None:
    store, other = JobStore(redis), JobStore(redis)
    await store.record(upd("queued"))
    queued_ms = int((await stored(redis, 101))["queued_ms"])
    await store.record(upd("queued"))  # a redelivery: the job still waits since it was first queued
    assert int((await stored(redis, 101))["queued_ms"]) == queued_ms
    picked = upd("in_progress")
    await store.record(picked)
    started_ms = int((await stored(redis, 101))["started_ms"])
    await store.record(upd("in_progress"))  # a duplicate changes nothing: no second fact
    await store.record(upd("completed"))
    completed_ms = int((await stored(redis, 101))["updated_ms"])
    first = await store.observations(limit=1)
    rest = await other.observations()  # another replica takes what is left, never the same facts
    assert [(o.runner, o.kind, o.seconds) for o in first] == [
        (picked.runner_name, "picked", (started_ms - queued_ms) / 1000)
    ]
    assert [(o.runner, o.kind, o.seconds, o.conclusion) for o in rest] == [
        (picked.runner_name, "completed", (completed_ms - started_ms) / 1000, "success")
    ]
    assert await store.observations() == []
    # A job cancelled before any runner took it is no runner's fact.
    await store.record(upd("queued", job_id=102))
    await store.record(upd("completed", job_id=102, picked=False))
    assert await store.observations() == []


def ran(status: str, job_id: int, runner: str, **kw: Any) -> JobUpdate:
    """A job's update naming the runner that took it."""
    return dataclasses.replace(upd(status, job_id=job_id, **kw), runner_name=runner)


async def test_a_webhook_says_nothing_about_a_runner_of_ours_bound_to_another_owner(redis: Redis) -> None:
    """An org owner signs deliveries for their own jobs only (owner-bound secrets), but may name any runner
    in them: a runner the reconciler bound to another owner (at its seat) is not marked busy or done by
    them. A runner of a global group may run anybody's job; Gitea's own listing (the poll) is believed."""
    store, coordination = JobStore(redis), Coordination(redis)
    epoch = await coordination.epoch(new_id="e")
    for name, owner in (("acme-1.aa", "ACME"), ("any-1.bb", "*")):
        bound = (name, owner)
        assert await coordination.take("g", name, maximum=9, epoch=epoch.id, taker="t", runner=bound) == "granted"
    evil = {"repo": "evil/tools"}
    await store.record(ran("in_progress", 201, "acme-1.aa", **evil), delivery_id="e1")
    await store.record(ran("in_progress", 202, "any-1.bb", **evil), delivery_id="e2")
    await store.record(ran("in_progress", 203, "acme-1.aa"), delivery_id="a1")  # acme's own
    busy = {text(r) for r in cast("list[bytes]", await redis.zrange("{grs}:busy", 0, -1))}
    assert "any-1.bb" in busy and "acme-1.aa" in busy
    assert "runner" not in await stored(redis, 201) and (await stored(redis, 203))["runner"] == "acme-1.aa"
    await store.record(ran("completed", 201, "acme-1.aa", **evil), delivery_id="e3")
    assert await redis.zscore("{grs}:done", "acme-1.aa") is None  # still busy with acme's job, as far as we know
    assert await redis.zscore("{grs}:busy", "acme-1.aa") is not None
    # Gitea's own word (a poll's listing) is believed whoever's job it is.
    polled = await store.now_ms()
    await store.record(ran("completed", 204, "acme-1.aa", **evil), polled_since_ms=polled)
    assert await redis.zscore("{grs}:done", "acme-1.aa") is not None
