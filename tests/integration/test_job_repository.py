"""Whose repository a job id is (store/jobs/records.py), on fakeredis and on a real redis-server.

Job ids are one sequence per Gitea, so a holder of a webhook secret bound to their own owner can sign a
delivery about an id not used yet in their own repository (a squat). Gitea's listing (the poll) is
the truth about an id's repository: it moves the id there whatever the states. Until a poll listed
it, a job's first delivery (`queued` or `waiting`) about another repository takes the id, so no
squat blocks the job whose id it is; no later state moves an id, and no webhook moves one a poll listed.
"""

from __future__ import annotations

from typing import Any

import pytest
from redis.asyncio import Redis

from tests.jobs import claim, model, stored
from webhook_scaler.store.jobs.model import ALL, JobUpdate, Scope
from webhook_scaler.store.jobs.records import JobStore, Outcome
from webhook_scaler.store.seats.coordination import Coordination

EVIL, ACME = "evil/tools", "acme/widgets"
STATES = ["waiting", "queued", "in_progress", "completed"]


def upd(status: str, *, job_id: int = 9, repo: str = ACME, **kw: Any) -> JobUpdate:
    return JobUpdate.from_payload(model(status, job_id=job_id, repo=repo, **kw))


async def where(redis: Redis, job_id: int = 9) -> dict[str, bool]:
    """Which queued indexes hold the job."""
    names = ["{grs}:queued", "{grs}:queued:owner:evil", "{grs}:queued:repo:evil/tools"]
    names += ["{grs}:queued:owner:acme", "{grs}:queued:repo:acme/widgets"]
    return {n.removeprefix("{grs}:queued"): await redis.zscore(n, str(job_id)) is not None for n in names}


IN_ACME = {"": True, ":owner:evil": False, ":repo:evil/tools": False, ":owner:acme": True, ":repo:acme/widgets": True}


@pytest.mark.parametrize("squat", STATES)
@pytest.mark.parametrize("listed", ["queued", "in_progress"])
async def test_a_poll_listing_an_id_under_another_repository_moves_it_there_whatever_the_states(
    redis: Redis, squat: str, listed: str
) -> None:
    """evil squats id 9 in its own repository (in any state, at a later attempt than acme's job, so a
    higher rank) and its group claims it; acme's deliveries are lost. The poll of acme lists 9 in
    acme/widgets: the record, its indexes and its claim follow Gitea, and a poll of evil drops nothing."""
    store, coordination = JobStore(redis), Coordination(redis)
    assert (await store.record(upd(squat, repo=EVIL, attempt=5), delivery_id="evil")).outcome is Outcome.APPLIED
    if squat == "queued":
        assert await claim(coordination, 9, holder="evil-runner", ttl_ms=60_000)
        assert (await where(redis))[":owner:evil"]
    since = await store.now_ms()
    added, dropped = await store.sync_polled(
        Scope("owner", "acme"), [upd(listed)], polled_since_ms=since, complete=True
    )
    assert (added, dropped) == (1, 0)
    record = await stored(redis, 9)
    assert (record["repo"], record["owner"], record["state"]) == (ACME, "acme", listed)
    assert record["attempt"] == str(upd(listed).attempt)
    assert await redis.get("{grs}:claim:9") is None, "evil's claim goes with evil's record"
    if listed == "queued":
        assert await where(redis) == IN_ACME
        assert [(j.job_id, j.repo) for j in await store.queued(Scope("owner", "acme"))] == [(9, ACME)]
        assert await claim(coordination, 9, holder="acme-runner", ttl_ms=60_000)
    else:
        assert not any((await where(redis)).values())
    assert await store.queued(Scope("owner", "evil")) == []
    for _ in range(2):  # evil's own complete listings never name 9: nothing of acme's is dropped
        since = await store.now_ms()
        assert await store.sync_polled(Scope("owner", "evil"), [], polled_since_ms=since, complete=True) == (0, 0)
    assert (await stored(redis, 9))["state"] == listed


@pytest.mark.parametrize("squat", STATES)
@pytest.mark.parametrize("first", ["queued", "waiting"])
async def test_a_jobs_first_delivery_takes_its_id_from_a_squat_no_poll_confirmed(
    redis: Redis, squat: str, first: str
) -> None:
    """Without a poll, evil's squat (any state) does not block acme's job: acme's `queued` (or `waiting`)
    moves the id to acme/widgets, as a new job, and evil's claim is dropped with evil's record."""
    store, coordination = JobStore(redis), Coordination(redis)
    await store.record(upd(squat, repo=EVIL, attempt=5), delivery_id="evil")
    if squat == "queued":
        assert await claim(coordination, 9, holder="evil-runner", ttl_ms=60_000)
    result = await store.record(upd(first), delivery_id="acme")
    assert (result.outcome, result.moved, result.state) == (Outcome.APPLIED, True, first)
    record = await stored(redis, 9)
    assert (record["repo"], record["state"], record["attempt"]) == (ACME, first, "0")
    assert await redis.get("{grs}:claim:9") is None
    if first == "queued":
        assert await where(redis) == IN_ACME
        assert await claim(coordination, 9, holder="acme-runner", ttl_ms=60_000)
    else:
        assert not any((await where(redis)).values())
        assert await redis.zscore("{grs}:waiting", "9") is not None


@pytest.mark.parametrize("later", ["in_progress", "completed"])
async def test_no_later_state_moves_an_id(redis: Redis, later: str) -> None:
    """acme's job 9 runs on acme's runner; evil's `in_progress` or `completed` about 9 in evil/tools
    (naming acme's runner) changes nothing: it is no job's first delivery."""
    store = JobStore(redis)
    await store.record(upd("queued"))
    running = upd("in_progress")
    await store.record(running)
    before = await stored(redis, 9)
    result = await store.record(upd(later, repo=EVIL, attempt=3), delivery_id="evil")
    assert (result.outcome, result.reason, result.moved) == (Outcome.CONFLICT, "started", False)
    assert await stored(redis, 9) == before
    assert await redis.zscore("{grs}:done", running.runner_name or "") is None
    assert await redis.get("{grs}:delivery:evil") is None, "a refused delivery's id is not spent"


async def test_no_webhook_moves_an_id_a_poll_listed(redis: Redis) -> None:
    """Once a poll listed 9 under acme/widgets, evil's `queued` about 9 is refused, also after acme's
    own later deliveries rewrote the record; a poll listing it elsewhere would still move it."""
    store = JobStore(redis)
    await store.record(upd("queued"))
    await store.sync_polled(
        Scope("owner", "acme"), [upd("queued")], polled_since_ms=await store.now_ms(), complete=True
    )
    refused = await store.record(upd("queued", repo=EVIL, attempt=4), delivery_id="evil-1")
    assert (refused.outcome, refused.reason, refused.previous) == (Outcome.CONFLICT, "listed", "queued")
    assert (await store.record(upd("in_progress"))).outcome is Outcome.APPLIED  # acme's job goes on
    assert (await store.record(upd("queued", repo=EVIL, attempt=4), delivery_id="evil-2")).reason == "listed"
    assert (await stored(redis, 9))["repo"] == ACME
    since = await store.now_ms()
    moved = await store.sync_polled(
        Scope("owner", "evil"), [upd("queued", repo=EVIL)], polled_since_ms=since, complete=True
    )
    assert moved == (1, 0) and (await stored(redis, 9))["repo"] == EVIL


async def test_a_move_retries_when_the_record_moved_again_meanwhile(redis: Redis) -> None:
    """The script names the indexes it touches, so a move learns the record's repository first; when
    another move lands in between, it moves from where the record is then."""
    store = JobStore(redis)
    await store.record(upd("queued", repo=EVIL, attempt=5), delivery_id="evil")
    other = JobStore(redis)
    script, replies = store._record, []

    async def interleaved(*, keys: Any, args: Any) -> Any:
        reply = await script(keys=keys, args=args)
        replies.append(reply[0])
        if len(replies) == 1:  # between learning the repository and moving from it, it moves again
            await other.record(upd("queued", repo="mallory/x"), delivery_id="mallory")
        return reply

    store._record = interleaved  # type: ignore[assignment]
    result = await store.record(upd("queued"), delivery_id="acme")
    assert (result.outcome, result.moved) == (Outcome.APPLIED, True)
    assert [r if isinstance(r, str) else r.decode() for r in replies] == ["move", "move", "applied"]
    assert await redis.zcard("{grs}:queued:owner:mallory") == 0
    assert await where(redis) == IN_ACME
    assert [(j.job_id, j.repo) for j in await store.queued(ALL)] == [(9, ACME)]


async def test_a_move_gives_up_when_other_moves_keep_moving_the_record(redis: Redis) -> None:
    """A bounded number of attempts: a record moved again before each of them is left as the last move
    left it, and the update is answered as a conflict (`moving`), so no delivery loops on a flapping id."""
    store, other = JobStore(redis), JobStore(redis)
    await store.record(upd("queued", repo=EVIL), delivery_id="evil")
    script, moves = store._record, iter(range(100))

    async def flapping(*, keys: Any, args: Any) -> Any:
        reply = await script(keys=keys, args=args)
        await other.record(upd("queued", repo=f"mallory/x{next(moves)}"))
        return reply

    store._record = flapping  # type: ignore[assignment]
    result = await store.record(upd("queued"), delivery_id="acme")
    assert (result.outcome, result.reason, result.previous) == (Outcome.CONFLICT, "moving", "queued")
    assert (await stored(redis, 9))["repo"] == "mallory/x2"
    assert await redis.get("{grs}:delivery:acme") is None
