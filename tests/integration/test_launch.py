"""A runner's Job created while its runner registers (`loop/passes/launch.py` through `Seating.create`),
on fakeredis and on a real redis-server: once a group's token registered a runner, its next runners'
Jobs do not wait on Gitea's Register, and no interleaving of the two costs a promise. A Register that
fails after its Job was created deletes that Job (its Pod never had a credential), a Job that cannot be
deleted keeps its seat, and a replica stopped between the two leaves a Job that holds its seat and
never runs. The interleavings are held by hooks: a Register waits until the API server took the Job."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
from redis.asyncio import Redis

from reconciler.decide.plan import Create
from reconciler.gitea.api import GiteaError
from reconciler.gitea.register import Registration, RegistrationRefused
from reconciler.kube.api import Kube, TransientError
from reconciler.kube.objects import GroupObject
from reconciler.loop.passes.registrations import REFUSED, UNREGISTERED, Registrations
from reconciler.loop.passes.seating import Seating
from tests.fake_gitea import FakeRegistrar
from tests.groups import spec
from tests.jobs import model
from webhook_scaler.store.jobs.model import JobUpdate
from webhook_scaler.store.jobs.records import JobStore
from webhook_scaler.store.seats.coordination import Coordination

GROUP = GroupObject("ci", "builders", "uid-1", 1, {}, {})
TOKEN = "registration-token"
SPEC = spec(maxActiveRunners=2)
HOLD_S = 5.0  # how long a hook waits for the step it holds for: far longer than it takes


@dataclass
class ApiServer:
    """The API server as a create asks it, with the order of what it took: ("job" | "secret" | "delete",
    name). A Job's create sets its event (`landed`); `delete_error` fails deletes."""

    took: list[tuple[str, str]] = field(default_factory=list)
    landed: dict[str, asyncio.Event] = field(default_factory=dict)
    delete_error: Exception | None = None

    def event(self, name: str) -> asyncio.Event:
        return self.landed.setdefault(name, asyncio.Event())

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        return TOKEN

    async def create_job(self, body: dict[str, Any]) -> str | None:
        name = body["metadata"]["name"]
        if ("job", name) in self.took:
            return None
        self.took.append(("job", name))
        self.event(name).set()
        return f"uid-{name}"

    async def create_secret(self, body: dict[str, Any]) -> str:
        owner = body["metadata"]["ownerReferences"][0]["name"]
        self.took.append(("secret", owner))
        return "uid-secret"

    async def delete_job(self, namespace: str, name: str) -> None:
        if self.delete_error is not None:
            raise self.delete_error
        self.took.append(("delete", name))


class Gitea(FakeRegistrar):
    """Gitea's Register; for the runner of `hold_for` (a Job name), it waits until that Job was created,
    records whether it was (`saw_job`), then answers or fails with `error`; `stuck` never answers."""

    def __init__(self, api: ApiServer) -> None:
        super().__init__(tokens={TOKEN})
        self.api = api
        self.hold_for = ""
        self.error: Exception | None = None
        self.stuck = False
        self.saw_job: dict[str, bool] = {}

    async def register(self, url: str, token: str, *, name: str, labels: Sequence[str]) -> Registration:
        job = name.split(".", 1)[0]  # the runner's name starts with its Job's
        if job == self.hold_for:
            async with asyncio.timeout(HOLD_S):  # (not wait_for: on 3.11 it can swallow a cancel)
                await self.api.event(job).wait()
            if self.stuck:
                await asyncio.Event().wait()
        self.saw_job[job] = ("job", job) in self.api.took
        if job == self.hold_for and self.error is not None:
            raise self.error
        return await super().register(url, token, name=name, labels=labels)


@dataclass
class Replica:
    coordination: Coordination
    epoch: str
    api: ApiServer
    gitea: Gitea
    seating: Seating

    async def create(self, job_id: int) -> str:
        return await self.seating.create(GROUP, SPEC, Create(job_id, 0), f"builders-{job_id}-0", self.epoch)

    async def held(self) -> list[str]:
        return sorted((await self.coordination.seats(GROUP.uid)).held)

    async def claimed(self, job_id: int) -> bool:
        return bool(await self.coordination.redis.exists(self.coordination.keys.claim(job_id)))


async def queued(redis: Redis, *job_ids: int) -> None:
    for job_id in job_ids:
        update = JobUpdate.from_payload(model("queued", job_id=job_id))
        await JobStore(redis).record(update, delivery_id=f"d{job_id}")


def replica(coordination: Coordination, epoch: str, name: str) -> Replica:
    api = ApiServer()
    gitea = Gitea(api)
    registrations = Registrations(cast(Kube, api), gitea)
    seating = Seating(coordination, cast(Kube, api), registrations, claim_ttl_s=600, replica=name)
    return Replica(coordination, epoch, api, gitea, seating)


@pytest.fixture
async def a(redis: Redis) -> Replica:
    """Replica A, whose group's token registered job 7's runner already (registering first)."""
    coordination = Coordination(redis)
    epoch = (await coordination.epoch(new_id="e1")).id
    await queued(redis, 7, 8, 9)
    made = replica(coordination, epoch, "replica-a")
    assert await made.create(7) == "created"
    return made


async def test_a_groups_first_runner_registers_before_its_job_and_the_next_while_its_job_is_created(
    a: Replica,
) -> None:
    """The first runner of a group registers before anything is created (a token Gitea refuses costs no
    Job); once its token registered one, the next runner's Job is created while it registers, and its
    credential Secret comes after both."""
    assert a.gitea.saw_job["builders-7-0"] is False, "the first runner registered before its Job existed"
    a.gitea.hold_for = "builders-8-0"
    assert await a.create(8) == "created"
    assert a.gitea.saw_job["builders-8-0"] is True, "job 8's Job was created while its runner registered"
    assert a.api.took[-2:] == [("job", "builders-8-0"), ("secret", "builders-8-0")]
    assert await a.held() == ["builders-7-0", "builders-8-0"]


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        pytest.param(GiteaError("registering runner: HTTP 500", status=500), UNREGISTERED, id="gitea-failed"),
        pytest.param(RegistrationRefused("registering runner: token not found", status=500), REFUSED, id="refused"),
    ],
)
async def test_a_register_that_fails_after_its_job_was_created_deletes_the_job_and_frees_its_seat(
    a: Replica, error: Exception, reason: str
) -> None:
    """Job 8's Job is created, then its Register fails: the Job is deleted (its Pod never had a
    credential, so no runner ever ran in it), no Secret is made, and its seat and job 8's claim are free
    at once. The group's token is no longer proven: the next runner registers before its Job again."""
    a.gitea.hold_for, a.gitea.error = "builders-8-0", error
    with pytest.raises(TransientError) as failed:
        await a.create(8)
    assert failed.value.refused == reason
    assert a.api.took[-2:] == [("job", "builders-8-0"), ("delete", "builders-8-0")]
    assert ("secret", "builders-8-0") not in a.api.took
    assert await a.held() == ["builders-7-0"] and not await a.claimed(8)
    a.gitea.hold_for, a.gitea.error = "", None
    assert await a.create(9) == "created"
    assert a.gitea.saw_job["builders-9-0"] is False, "registered first again after the failure"


async def test_a_job_whose_register_failed_and_that_could_not_be_deleted_keeps_its_seat(a: Replica) -> None:
    """The Register fails and the delete does too (the API server is down): the Job may be there, so its
    seat stays (a third runner would lift the cap of 2 if it ran) and only job 8's claim is released;
    its Pod waits for a Secret that never comes until its pendingTimeout reaps it."""
    a.gitea.hold_for, a.gitea.error = "builders-8-0", GiteaError("registering runner: HTTP 502", status=502)
    a.api.delete_error = TransientError("the API server did not answer")
    with pytest.raises(TransientError) as failed:
        await a.create(8)
    assert not failed.value.refused and "could not be deleted" in str(failed.value)
    assert TOKEN not in str(failed.value)
    assert ("secret", "builders-8-0") not in a.api.took
    assert await a.held() == ["builders-7-0", "builders-8-0"] and not await a.claimed(8)
    assert await a.coordination.take(GROUP.uid, "builders-9-0", maximum=2, epoch=a.epoch, taker="b/1") == "full"


async def test_a_replica_stopped_between_the_job_and_its_credential_never_gives_the_job_a_second_runner(
    a: Replica,
) -> None:
    """Replica A created job 8's Job and stopped while its runner registered (killed: nothing of it runs
    again). The Job has no credential, so no runner runs in it; it holds its seat, and replica B can
    neither take job 8 while A's claim lives nor start another runner above the cap after it lapsed."""
    a.gitea.hold_for, a.gitea.stuck = "builders-8-0", True
    stopped = asyncio.ensure_future(a.create(8))
    try:
        await asyncio.wait_for(a.api.event("builders-8-0").wait(), HOLD_S)
        b = replica(a.coordination, a.epoch, "replica-b")
        assert await b.create(8) == "claimed", "job 8 is A's while its claim lives"
        await a.coordination.redis.delete(a.coordination.keys.claim(8))  # A's claim lapsed
        taken = await b.seating.create(GROUP, SPEC, Create(8, 0), "builders-8-1", a.epoch)
        assert taken == "full", "A's Job holds its seat: a second runner for job 8 would lift the cap"
        assert b.api.took == [] and ("secret", "builders-8-0") not in a.api.took
    finally:
        stopped.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopped


async def test_a_create_cancelled_while_its_runner_registers_deletes_its_job(a: Replica) -> None:
    """The controller stops (its pass cancelled) after job 8's Job was created and before its runner
    registered: the Job goes with it, so no Pod waits for a credential that never comes."""
    a.gitea.hold_for, a.gitea.stuck = "builders-8-0", True
    creating = asyncio.ensure_future(a.create(8))
    await asyncio.wait_for(a.api.event("builders-8-0").wait(), HOLD_S)  # its Register is in flight
    creating.cancel()
    with pytest.raises(asyncio.CancelledError):
        await creating
    assert a.api.took[-1] == ("delete", "builders-8-0") and not await a.claimed(8)
