"""deletions.py and drain.py against the fake Gitea (every answer checked against Gitea's OpenAPI spec) and
a recording Kube: a deleted group's drain always ends, and runners disabled in Gitea are never forgotten.

The passes here are the two calls a group's pass makes of these modules (`GroupPass.run`): the plan's
deletions (`Deletions.apply`), then the finalizer (`Deletions.hold_or_finish`), with the clock given."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from reconciler.decide.plan import Delete
from reconciler.gitea.api import GiteaClient, GiteaError
from reconciler.kube.api import PermanentError
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.retiring.deletions import RECALL_S, Deletions
from reconciler.loop.retiring.drain import FINALIZER, GONE_AFTER_S
from reconciler.loop.retiring.vetting import SETTLE, RunnerRows
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from tests.fake_gitea import FakeGitea
from tests.groups import spec
from tests.redis_server import free_port

MakeServer = Callable[[web.Application], Awaitable[TestServer]]
TOKEN = "api-token-value"
DELETED_AT = 1_700_000_000.0  # the group's deletionTimestamp, in seconds
TIMEOUT = 3600.0  # GRS_DRAIN_TIMEOUT
SERVED = GroupObject("ci", "builders", "u-1", 1, {}, {}, finalizers=(FINALIZER,))
DELETED = dataclasses.replace(SERVED, deleting=True, deleted_ms=int(DELETED_AT * 1000))
IDLE, BUSY = "builders-w-aaaaaa", "builders-7-0"


class RecordingKube:
    """The Kube calls these modules make: the group's API token (its Secret can go), runner Job
    deletions, Events and finalizer patches, recorded."""

    def __init__(self) -> None:
        self.token: str | None = TOKEN  # None: the Secret is gone
        self.deleted: list[str] = []
        self.events: list[tuple[str, str]] = []  # (reason, message)
        self.finalizers: list[list[dict[str, Any]]] = []

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        assert (namespace, name, key) == ("ci", "gitea", "api")
        if self.token is None:
            raise PermanentError(f"Secret {namespace}/{name} not found")
        return self.token

    async def delete_job(self, namespace: str, name: str) -> None:
        self.deleted.append(name)

    async def event(self, group: Any, *, kind: str, reason: str, message: str) -> None:
        assert kind == "Warning" and TOKEN not in message
        self.events.append((reason, message))

    async def patch_finalizers(self, group: Any, ops: Sequence[dict[str, Any]]) -> None:
        self.finalizers.append(list(ops))

    @property
    def let_go(self) -> bool:
        """Whether the finalizer was removed."""
        return any(op["op"] == "remove" for ops in self.finalizers for op in ops)


class Claims:
    """The coordination a deletion releases its runner's claim in."""

    async def release(self, job_id: int, *, holder: str) -> None:
        pass


@dataclasses.dataclass
class Rig:
    fake: FakeGitea
    kube: RecordingKube
    deletions: Deletions
    spec: RunnerGroupSpec
    clock: list[float]  # the monotonic clock of `rows` (BUSY_HOLD, the recall's interval)

    async def run(
        self, group: GroupObject, jobs: Sequence[JobObject], deletes: Sequence[Delete] = (), *, now: float
    ) -> bool:
        """One pass of `group`: the plan's `deletes` applied, then its finalizer; whether it was let go
        (or, served, held). `now`: seconds since the epoch."""
        await self.deletions.apply(group, self.spec, deletes, GroupState(), jobs)
        return await self.deletions.hold_or_finish(group, self.spec, list(jobs), int(now * 1000), TIMEOUT)


@pytest.fixture
async def rig(aiohttp_server: MakeServer) -> AsyncIterator[Rig]:
    fake = FakeGitea(token=TOKEN)
    server = await aiohttp_server(fake.app())
    async with aiohttp.ClientSession() as session:
        yield rigged(fake, GiteaClient(session), str(server.make_url("")).rstrip("/"))


def rigged(fake: FakeGitea, gitea: GiteaClient, url: str) -> Rig:
    async def no_wait(seconds: float) -> None:
        assert seconds == SETTLE

    kube, clock = RecordingKube(), [0.0]
    rows = RunnerRows(gitea, kube, Metrics.create(CollectorRegistry()), sleep=no_wait, clock=lambda: clock[0])  # type: ignore[arg-type]
    deletions = Deletions(kube=kube, coordination=lambda spec: Claims(), rows=rows, metrics=rows.metrics)  # type: ignore[arg-type,return-value]
    return Rig(fake, kube, deletions, spec(gitea={"url": url}), clock)


def job(name: str, finished: str = "", job_id: int | None = None) -> JobObject:
    return JobObject("ci", name, "builders", job_id, 0, finished, "", runner_name=f"{name}.0badc0de")


def reasons(kube: RecordingKube) -> list[str]:
    return [reason for reason, _ in kube.events]


async def test_a_group_deleted_with_its_token_secret_keeps_its_runners_rows_out_of_gitea(rig: Rig) -> None:
    """GitOps deletes a group and its token Secret together: the token last read while the group was
    served drains it as if the Secret were there. The idle runner is disabled, its row and Job deleted,
    and the group goes once no row is left: no DrainAbandoned."""
    idle_row = rig.fake.add_runner(f"{IDLE}.0badc0de")
    jobs = [job(IDLE)]
    assert await rig.run(SERVED, jobs, now=DELETED_AT - 60)  # served: the finalizer held, the token kept
    rig.kube.token = None
    assert not await rig.run(DELETED, jobs, [Delete(IDLE, "drain")], now=DELETED_AT + 5)
    assert rig.kube.deleted == [IDLE] and rig.fake.deleted == [idle_row]
    assert rig.fake.requests["org_runner_disable"] == 1, "asked in Gitea first: disabled, confirmed idle"
    assert await rig.run(DELETED, [], now=DELETED_AT + 10), "no Job, no row left: the group goes"
    assert rig.kube.let_go and reasons(rig.kube) == []
    assert not rig.fake.runners


async def test_a_drain_whose_token_cannot_be_read_deletes_the_idle_runners_and_waits_for_the_busy_ones(
    rig: Rig,
) -> None:
    """The token Secret is gone and this process never read it (it restarted): Gitea cannot be asked.
    The drain is abandoned, once, with a Warning Event; the runners not known busy are deleted without
    asking Gitea, the one Redis knows busy (the plan does not delete it) runs its job to the end, and the
    group goes when it is done. The rows stay in Gitea."""
    rig.kube.token = None
    rig.fake.add_runner(f"{IDLE}.0badc0de")
    jobs = [job(IDLE), job(BUSY, job_id=7)]
    assert not await rig.run(DELETED, jobs, [Delete(IDLE, "drain")], now=DELETED_AT + 5)
    assert rig.kube.deleted == [], "Gitea could not be asked: kept this pass"
    ((reason, message),) = rig.kube.events
    assert reason == "DrainAbandoned" and "ci/builders" in message and "Secret ci/gitea not found" in message
    assert not await rig.run(DELETED, jobs, [Delete(IDLE, "drain")], now=DELETED_AT + 10)
    assert rig.kube.deleted == [IDLE], "the idle runner goes without asking Gitea"
    assert not rig.kube.let_go, "the busy runner holds the group"
    done = [job(BUSY, "Complete", job_id=7)]
    assert await rig.run(DELETED, done, now=DELETED_AT + 600)
    assert rig.kube.let_go and reasons(rig.kube) == ["DrainAbandoned"], "said once"
    assert rig.fake.deleted == [], "nothing was asked of Gitea"


@pytest.mark.parametrize("answer", [401, 403, 404])
async def test_a_drain_gitea_refuses_ends_at_once(rig: Rig, answer: int) -> None:
    """The token was revoked (401), lost its scopes (403), or the scope is gone (404): the runners are
    done, but their rows cannot be asked about. The group goes with a DrainAbandoned Warning Event,
    instead of its pass failing for good."""
    if answer == 401:
        rig.kube.token = "revoked-token"
    elif answer == 403:
        rig.fake.refused = {"org_runners"}
    else:
        rig.fake.fail_with = 404
    assert await rig.run(DELETED, [job(IDLE, "Complete")], now=DELETED_AT + 5)
    assert rig.kube.let_go
    ((reason, message),) = rig.kube.events
    assert reason == "DrainAbandoned" and f"HTTP {answer}" in message


async def test_a_drain_of_a_gitea_switched_off_ends_after_gone_after(aiohttp_server: MakeServer) -> None:
    """Nothing answers at the group's Gitea: the pass is retried (a transient error) until Gitea has
    answered none of the drain's calls for GONE_AFTER_S; then the drain is abandoned and the group goes."""
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    async with aiohttp.ClientSession() as session:
        rig = rigged(FakeGitea(token=TOKEN), GiteaClient(session, timeout=5), url)
        for at in (5, 5 + GONE_AFTER_S / 2, 5 + GONE_AFTER_S - 1):
            with pytest.raises(GiteaError):
                await rig.run(DELETED, [], now=DELETED_AT + at)
            assert not rig.kube.let_go and rig.kube.events == []
        assert await rig.run(DELETED, [], now=DELETED_AT + 5 + GONE_AFTER_S)
    assert rig.kube.let_go
    ((reason, message),) = rig.kube.events
    assert reason == "DrainAbandoned" and "answered none of its calls for 300 s" in message


@pytest.mark.parametrize("known", [True, False], ids=["deletionTimestamp", "first-seen"])
async def test_a_drain_ends_at_its_deadline_whatever_is_left(rig: Rig, known: bool) -> None:
    """A busy runner's job outlasts GRS_DRAIN_TIMEOUT: at the deadline, counted from the group's
    deletionTimestamp (or, not known, from when the drain was first seen), the finalizer goes with a
    Warning Event naming the runner Job left."""
    group = DELETED if known else dataclasses.replace(DELETED, deleted_ms=0)
    busy_row = rig.fake.add_runner(f"{BUSY}.0badc0de", busy=True)
    jobs = [job(BUSY, job_id=7)]
    start = DELETED_AT if known else DELETED_AT + 100
    if not known:
        assert not await rig.run(group, jobs, now=start)
    assert not await rig.run(group, jobs, now=start + TIMEOUT - 1)
    assert not rig.kube.let_go and rig.kube.events == []
    assert await rig.run(group, jobs, now=start + TIMEOUT)
    assert rig.kube.let_go
    ((reason, message),) = rig.kube.events
    assert reason == "DrainTimedOut" and f"runner Jobs {BUSY}" in message and "GRS_DRAIN_TIMEOUT" in message
    assert rig.kube.deleted == [] and busy_row in rig.fake.runners, "nothing more was deleted"


@pytest.mark.parametrize("busy", [False, True], ids=["idle", "running-its-job"])
async def test_a_runner_disabled_before_a_restart_is_deleted_not_kept_as_capacity(rig: Rig, busy: bool) -> None:
    """A runner disabled for a scale-down whose deletion this process never saw through (it restarted,
    or another replica disabled it) takes no job, yet counts as the group's capacity: the first pass
    finds it disabled in Gitea and retires it (deleted, reason `disabled`), unless Gitea says it runs a
    job (it took one before the disable: it runs it to the end). A runner that is not disabled is left."""
    disabled = rig.fake.add_runner(f"{IDLE}.0badc0de", busy=busy)
    rig.fake.runners[disabled]["disabled"] = True
    other = rig.fake.add_runner("builders-w-bbbbbb.0badc0de")
    jobs = [job(IDLE), job("builders-w-bbbbbb")]
    assert await rig.run(SERVED, jobs, now=DELETED_AT)
    assert rig.kube.deleted == ([] if busy else [IDLE]) and rig.fake.deleted == ([] if busy else [disabled])
    assert other in rig.fake.runners and not rig.fake.runners[other]["disabled"]
    counted = rig.deletions.metrics.runners_deleted.labels(group="ci/builders", reason="disabled")._value.get()
    assert counted == (0 if busy else 1)
    listed = rig.fake.requests["org_runners"]
    assert await rig.run(SERVED, jobs, now=DELETED_AT + 1)
    assert rig.fake.requests["org_runners"] == listed, f"looked for again only after {RECALL_S:g} s"
    rig.clock[0] += RECALL_S
    assert await rig.run(SERVED, jobs, now=DELETED_AT + RECALL_S)
    assert rig.fake.requests["org_runners"] > listed
