"""Seats and creates (`loop/seating.py` over `store/seats`), on fakeredis and on a real redis-server: the
cap on a group's runners (`maxActiveRunners`) holds while seats are reclaimed and given back, and a
slow or failed Register fails that runner's create only. Interleavings of replicas are made
deterministic by hooks that hold one replica's step until another replica's has happened."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from reconciler.decide.plan import Create
from reconciler.gitea.api import GiteaError
from reconciler.gitea.register import Registration
from reconciler.kube.api import Kube, TransientError
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.passes.registrations import UNREGISTERED, Registrations
from reconciler.loop.passes.seating import Seating
from reconciler.loop.state import GroupState
from tests.fake_gitea import FakeRegistrar
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
    if taker_dead:  # killed, and its Pod's container runs a new process: A's is gone for sure
        await redis.delete(coordination.keys.alive("replica-a/1"))
        await coordination.heartbeat("replica-a/2")

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


TOKEN = "registration-token"


class Registering(FakeRegistrar):
    """Gitea's Register as the controller calls it: `during` runs while the call is in flight (other
    replicas act, time passes), then it answers, or fails with `error`."""

    def __init__(self) -> None:
        super().__init__(tokens={TOKEN})
        self.during: Callable[[], Awaitable[None]] = _nothing
        self.error: GiteaError | None = None

    async def register(self, url: str, token: str, *, name: str, labels: Sequence[str]) -> Registration:
        await self.during()
        if self.error is not None:
            raise self.error
        return await super().register(url, token, name=name, labels=labels)


async def _nothing() -> None:
    return None


class CreatingKube:
    """The API server as a create asks it: the registration token, the runner Job and its credential."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.sending: Callable[[], Awaitable[None]] = _nothing  # runs as a create is on its way

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        return TOKEN

    async def create_job(self, body: dict[str, Any]) -> str | None:
        await self.sending()
        name = body["metadata"]["name"]
        if name in self.created:
            return None  # 409: there is one of that name
        self.created.append(name)
        return f"uid-{name}"

    async def create_secret(self, body: dict[str, Any]) -> str:
        return "uid-secret"


class Clock:
    """Replica A's monotonic clock (`seating.time`): it moves only when the test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@dataclass
class ReplicaA:
    """One replica creating the runner for job 7 through `Seating.create`, with hooks into its Register."""

    coordination: Coordination
    epoch: str
    kube: CreatingKube
    registrar: Registering
    seating: Seating
    clock: Clock

    async def create(self) -> str:
        return await self.seating.create(GROUP, spec(maxActiveRunners=1), Create(7, 0), "builders-7-0", self.epoch)

    async def other_replica_takes_job_7_again(self) -> None:
        """Replica C, once A's claim lapsed: the same job, so the same runner Job name and seat."""
        await self.coordination.redis.delete(self.coordination.keys.claim(7))
        taken = await self.coordination.take(
            GROUP.uid, "builders-7-0", maximum=1, epoch=self.epoch, taker="replica-c/1", job_id=7, claim_ttl_ms=30_000
        )
        assert taken == "granted"


@pytest.fixture
async def replica_a(redis: Redis, monkeypatch: pytest.MonkeyPatch) -> ReplicaA:
    coordination = Coordination(redis)
    epoch = (await coordination.epoch(new_id="e1")).id
    await queued(redis, 7)
    kube, registrar, clock = CreatingKube(), Registering(), Clock()
    monkeypatch.setattr("reconciler.loop.passes.seating.time", clock)
    registrations = Registrations(cast(Kube, kube), registrar)
    seating = Seating(coordination, cast(Kube, kube), registrations, claim_ttl_s=600, replica="replica-a")
    return ReplicaA(coordination, epoch, kube, registrar, seating, clock)


async def held(a: ReplicaA) -> list[str]:
    return sorted((await a.coordination.seats(GROUP.uid)).held)


async def test_a_register_gitea_does_not_answer_in_time_fails_that_create_only(replica_a: ReplicaA) -> None:
    """Gitea did not answer the Register in time (or failed): that runner's create is turned down, a
    refusal the pass counts (`grs_runner_creates_refused_total{reason="registration_failed"}`) and
    goes on from, not an error that ends the pass; its seat and claim are free again, so the job is
    taken again by the next pass."""
    a = replica_a
    a.registrar.error = GiteaError("registering runner builders-7-0.x at http://gitea.invalid:3000: TimeoutError")
    with pytest.raises(TransientError) as refused:
        await a.create()
    assert refused.value.refused == UNREGISTERED
    assert "TimeoutError" in str(refused.value) and TOKEN not in str(refused.value)
    assert await held(a) == [] and not await a.coordination.redis.exists(a.coordination.keys.claim(7))
    assert a.kube.created == []


async def test_a_slow_register_renews_the_seat_and_the_runner_is_created(replica_a: ReplicaA) -> None:
    """A Register slower than the create deadline (12.8 s, the median measured in a burst, against
    10 s) does not make the create late: the seat is granted again from the moment it returned, and
    the deadline starts again."""
    a = replica_a

    async def burst() -> None:
        a.clock.now += 12.8

    a.registrar.during = burst
    assert await a.create() == "created"
    assert a.kube.created == ["builders-7-0"] and await held(a) == ["builders-7-0"]


@pytest.mark.parametrize("fails", [False, True], ids=["slow", "failed"])
async def test_a_replica_never_gives_back_or_creates_on_a_seat_another_replica_took_again(
    replica_a: ReplicaA, fails: bool
) -> None:
    """While A's Register is slow, its claim lapses and replica C takes job 7 again: the same runner
    Job name, the same seat, now C's. If A's Register then fails, A must not free that seat (C's
    create holds it: freed, the group would get one runner more than its cap once C's Job lands and
    another take fills the seat); if it succeeds, A's create is late (C creates the Job)."""
    a = replica_a

    async def c_meanwhile() -> None:
        a.clock.now += 12.8
        await a.other_replica_takes_job_7_again()

    a.registrar.during = c_meanwhile
    if fails:
        a.registrar.error = GiteaError("registering runner builders-7-0.x at http://gitea.invalid:3000: HTTP 500")
        with pytest.raises(TransientError):
            await a.create()
    else:
        assert await a.create() == "late"
    assert a.kube.created == []
    assert await held(a) == ["builders-7-0"], "C's seat"
    assert await a.coordination.redis.get(a.coordination.keys.claim(7)) == b"builders-7-0", "C's claim"
    third = await a.coordination.take(GROUP.uid, "builders-9-0", maximum=1, epoch=a.epoch, taker="b/1")
    assert third == "full", "a second runner Job for a cap of 1"


@pytest.mark.parametrize("restarted", [False, True], ids=["paused", "killed-and-restarted"])
async def test_a_replica_paused_between_its_deadline_and_its_create_never_lifts_the_cap(
    replica_a: ReplicaA, restarted: bool
) -> None:
    """Replica A took the seat of job 7 (cap 1), passed its create deadline check, and stopped right there
    (SIGSTOP, a frozen VM) for longer than a heartbeat lives. Replica B's pass cannot tell it from a dead
    replica by its heartbeat: it keeps A's seat, so nothing else may start, and releases A's claim, so
    job 7 is taken again under the same Job name, in the same seat. When A resumes, its create and B's
    are one Job. A replica whose Pod runs a later process is dead for sure: its seat is freed."""
    a = replica_a
    b_kube = Kube404(_nothing)
    b = Seating(a.coordination, cast(Kube, b_kube), cast(Registrations, None), claim_ttl_s=600, replica="replica-b")
    seats = a.coordination.keys.seats(GROUP.uid)
    seen: dict[str, object] = {}

    async def paused_while_b_passes() -> None:
        a.kube.sending = _nothing
        now = (await a.coordination.epoch(new_id="unused")).now_ms
        await a.coordination.redis.zadd(seats, {"builders-7-0": now - int((ABANDONED_AFTER_S + 5) * 1000)}, xx=True)
        await a.coordination.redis.delete(a.coordination.keys.alive(a.seating.taker))  # its heartbeat lapsed
        if restarted:
            await a.coordination.heartbeat("replica-a/later")
        ready = await b.prepare(GROUP, spec(maxActiveRunners=1), [], GroupState(epoch=a.epoch), lease=None,
                                runners=[], queued=[7])  # fmt: skip
        assert ready is not None
        seen["in_flight"] = ready[0].in_flight
        await queued(a.coordination.redis, 9)
        seen["job 9"] = await b.coordination.take(
            GROUP.uid, "builders-9-0", maximum=1, epoch=a.epoch, taker=b.taker, job_id=9, claim_ttl_ms=30_000
        )
        seen["job 7"] = await b.coordination.take(
            GROUP.uid, "builders-7-0", maximum=1, epoch=a.epoch, taker=b.taker, job_id=7, claim_ttl_ms=30_000
        )

    a.kube.sending = paused_while_b_passes
    assert await a.create() == "created"  # A resumed: its create lands
    if restarted:
        assert b_kube.asked == ["builders-7-0"] and seen["job 9"] == "granted", seen
        return  # (A's create cannot land here: a killed process's request dies with its connection)
    assert seen["job 9"] == "full", f"a second runner for a cap of 1 while A's create may land: {seen}"
    assert b_kube.asked == [], "a silent taker's seat is not reclaimed"
    assert seen["job 7"] == "granted", f"job 7 is taken again, in A's seat: {seen}"
    assert seen["in_flight"] == frozenset(), "B's plan sees job 7 wanting its runner, not served by A's seat"
    assert a.kube.created == ["builders-7-0"]
    assert await held(a) == ["builders-7-0"]
    assert await a.coordination.take(GROUP.uid, "builders-9-0", maximum=1, epoch=a.epoch, taker="c/1") == "full"
