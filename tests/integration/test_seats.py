"""The cap on a group's runners (`maxActiveRunners`) holds while seats are reclaimed, on fakeredis and on
a real redis-server: the interleavings are made deterministic by hooks that hold one replica's step
until another replica's has happened."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

import pytest
from redis.asyncio import Redis

from reconciler.decide.state import GroupState
from reconciler.kube.api import Kube
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.registrations import Registrations
from reconciler.loop.seating import Seating
from tests.groups import spec
from tests.jobs import model
from webhook_scaler.store.jobs.model import JobUpdate
from webhook_scaler.store.jobs.records import JobStore
from webhook_scaler.store.seats.coordination import ABANDONED_AFTER_S, RECLAIM_AFTER_S, Coordination

GROUP = GroupObject("ci", "builders", "uid-1", 1, {}, {})
CAP = 2


class Kube404:
    """The API server as `Seating` asks it: whether a Job exists. `meanwhile` runs while the question is
    in flight, i.e. after the replica chose the seats to reclaim and before it frees them."""

    def __init__(self, meanwhile: Callable[[], Awaitable[None]]) -> None:
        self.meanwhile = meanwhile
        self.asked: list[str] = []

    async def job_exists(self, namespace: str, name: str) -> bool:
        self.asked.append(name)
        await self.meanwhile()
        return False  # the other replica's create has not landed yet


def job(name: str) -> JobObject:
    return JobObject("ci", name, "builders", None, created_ms=0, finished="", reason="")


async def queued(redis: Redis, job_id: int) -> None:
    await JobStore(redis).record(JobUpdate.from_payload(model("queued", job_id=job_id)), delivery_id=f"d{job_id}")


@pytest.mark.parametrize(
    ("age_s", "taker_dead"),
    [
        pytest.param(ABANDONED_AFTER_S + 5, True, id="abandoned-by-a-dead-replica"),
        pytest.param(RECLAIM_AFTER_S + 5, False, id="old-enough-to-reclaim"),
    ],
)
async def test_a_seat_taken_again_while_it_is_reclaimed_stays_taken(
    redis: Redis, age_s: float, taker_dead: bool
) -> None:
    """Replica A took the seat of runner Job `builders-7-0` and never created it (killed, or its create
    failed in a way that may have landed). Its claim lapsed, so replica C takes the job again: the Job's
    name is the same, so is the seat. Meanwhile replica B's pass reclaims that seat (its taker is dead,
    or it is old, and the API server has no such Job): B must not free the seat C's create now holds,
    or the group gets one runner more than its cap once C's Job lands and another take fills the seat."""
    coordination = Coordination(redis)
    epoch = (await coordination.epoch(new_id="e1")).id
    await queued(redis, 7)

    async def take_job_7(taker: str) -> str:
        return await coordination.take(
            GROUP.uid, "builders-7-0", maximum=CAP, epoch=epoch, taker=taker, job_id=7, claim_ttl_ms=30_000
        )

    assert await take_job_7("replica-a/1") == "granted"
    assert await coordination.take(GROUP.uid, "builders-warm", maximum=CAP, epoch=epoch, taker="b/1") == "granted"
    now = (await coordination.epoch(new_id="unused")).now_ms
    await redis.zadd(coordination.keys.seats(GROUP.uid), {"builders-7-0": now - int(age_s * 1000)}, xx=True)
    await redis.delete(coordination.keys.claim(7))  # A's claim lapsed
    if taker_dead:
        await redis.delete(coordination.keys.alive("replica-a/1"))

    async def replica_c_takes_the_job_again() -> None:
        assert await take_job_7("replica-c/1") == "granted"

    kube = Kube404(replica_c_takes_the_job_again)
    b = Seating(coordination, cast(Kube, kube), cast(Registrations, None), claim_ttl_s=600)
    state = GroupState(epoch=epoch)
    prepared = await b.prepare(GROUP, spec(), [job("builders-warm")], state, lease=None, runners=[], queued=[])
    assert prepared is not None
    assert kube.asked == ["builders-7-0"], "B chose the seat to reclaim"

    # C's Job lands beside builders-warm: the group is at its cap, and no third runner may start
    third = await coordination.take(GROUP.uid, "builders-9-0", maximum=CAP, epoch=epoch, taker="b/1")
    assert third == "full", "a third runner Job for a cap of 2"
    assert sorted((await coordination.seats(GROUP.uid)).held) == ["builders-7-0", "builders-warm"]
