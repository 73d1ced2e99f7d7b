"""Properties: any order and any duplication of a job's events ends in the in-order state; and
whatever another repository's deliveries said about its id meanwhile, Gitea's listing puts the job
back in its own repository, indexes included."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.jobs import model, stored
from webhook_scaler.store.jobs.model import ALL, JobUpdate
from webhook_scaler.store.jobs.records import JobStore
from webhook_scaler.store.keys import text

Event = tuple[str, dict[str, Any]]


@st.composite
def histories(draw: st.DrawFn) -> list[Event]:
    """One job's true event sequence: reruns, optional `needs:` waits, pickups, cancels."""
    events: list[Event] = []
    generations = draw(st.integers(1, 4))
    for g in range(1, generations + 1):
        if draw(st.booleans()):
            events.append(("waiting", {"attempt": g - 1}))
        events.append(("queued", {"attempt": g - 1}))
        end = draw(st.sampled_from(["picked", "cancelled", "open"]))
        if end == "picked":
            events.append(("in_progress", {"attempt": g}))
            if draw(st.booleans()) or g < generations:
                events.append(("completed", {"attempt": g}))
        elif end == "cancelled":
            # A never-picked job's rerun repeats the same attempt; only the poller tells those apart,
            # so the generated history ends here.
            events.append(("completed", {"attempt": g - 1, "picked": False}))
            break
        else:
            break
    return events


async def final_state(events: list[Event]) -> tuple[Any, ...]:
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    store = JobStore(redis)
    for status, kw in events:
        await store.record(JobUpdate.from_payload(model(status, **kw)))
    record = await stored(redis, 101)
    queued = [j.job_id for j in await store.queued(ALL)]
    return record["state"], record["rank"], record["attempt"], queued


@settings(max_examples=150, deadline=None)
@given(data=st.data(), history=histories())
def test_any_order_and_duplication_converges(data: st.DataObject, history: list[Event]) -> None:
    delivered = data.draw(st.lists(st.sampled_from(history), min_size=0, max_size=len(history) * 2))
    shuffled = data.draw(st.permutations(history + delivered))
    expected = asyncio.run(final_state(history))
    assert asyncio.run(final_state(list(shuffled))) == expected
    assert expected[0] == history[-1][0]


squats = st.lists(
    st.tuples(st.sampled_from(["waiting", "queued", "in_progress", "completed"]), st.integers(0, 6)), max_size=4
)


async def after_squats_and_a_poll(events: list[Event], listed: Event) -> tuple[Any, ...]:
    """Record the deliveries in order, then what Gitea lists (`listed`, as a poll records it); the
    record and every index that holds job 101."""
    redis = fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer())
    store = JobStore(redis)
    for n, (status, kw) in enumerate(events):
        await store.record(JobUpdate.from_payload(model(status, **kw)), delivery_id=str(n))
    await store.record(JobUpdate.from_payload(model(listed[0], **listed[1])), polled_since_ms=await store.now_ms())
    record = await stored(redis, 101)
    holding = [text(key) async for key in redis.scan_iter("{grs}:*", _type="zset")]
    holding = sorted([key for key in holding if await redis.zscore(key, "101") is not None])
    return record["repo"], record["state"], record["attempt"], holding


@settings(max_examples=100, deadline=None)
@given(data=st.data(), history=histories(), squatted=squats)
def test_whatever_another_repository_said_a_poll_puts_the_job_back(
    data: st.DataObject, history: list[Event], squatted: list[tuple[str, int]]
) -> None:
    evil = [(status, {"attempt": attempt, "repo": "evil/tools"}) for status, attempt in squatted]
    order = data.draw(st.permutations(history + evil))
    repo, state, attempt, holding = asyncio.run(after_squats_and_a_poll(list(order), history[-1]))
    last, kw = history[-1]
    assert (repo, state, attempt) == ("acme/widgets", last, str(kw["attempt"]))
    indexes = ["{grs}:queued", "{grs}:queued:owner:acme", "{grs}:queued:repo:acme/widgets"]
    assert holding == sorted(indexes if last == "queued" else ["{grs}:waiting"] if last == "waiting" else [])
