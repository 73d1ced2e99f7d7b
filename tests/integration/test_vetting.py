"""Deletion vetting (`loop/retiring/vetting.py`) against the fake Gitea (every answer checked against
Gitea's OpenAPI spec): which runner deletions go ahead, the runner rows deleted with them, and the ghost
sweep."""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import fakeredis
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from reconciler.decide.plan import Delete
from reconciler.gitea.api import GiteaClient, PollScope, RunnersListing
from reconciler.kube.api import Kube
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.retiring import ghosts as gitea_ghosts
from reconciler.loop.retiring.vetting import SETTLE, RunnerRows, Vetted
from reconciler.loop.scopes import owners, owners_of_runner, scope_of
from reconciler.metrics import Metrics
from reconciler.model.names import group_key, job_name, runner_name
from tests.fake_gitea import FakeGitea
from tests.groups import spec
from webhook_scaler.store.seats.coordination import Coordination

MakeServer = Callable[[web.Application], Awaitable[TestServer]]
TOKEN = "api-token-value"
GROUP = GroupObject(namespace="ci", name="builders", uid="u-1", generation=1, spec={}, status={})


class Secrets:
    """Kube's one call these need: the group's API token."""

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        assert (namespace, name, key) == ("ci", "gitea", "api")
        return TOKEN


@pytest.fixture
async def gitea(aiohttp_server: MakeServer) -> tuple[FakeGitea, str]:
    fake = FakeGitea(token=TOKEN)
    server = await aiohttp_server(fake.app())
    return fake, str(server.make_url("")).rstrip("/")


async def vet(
    url: str, deletes: list[Delete], *, now: float = 0.0, rows: RunnerRows | None = None, **spec_changes: Any
) -> tuple[Vetted, RunnerRows]:
    async with aiohttp.ClientSession() as session:
        rows = rows or runner_rows(clock=lambda: now)
        rows.gitea = GiteaClient(session)
        return await rows.vet(GROUP, spec(gitea={"url": url}, **spec_changes), deletes), rows


def runner_rows(**kwargs: Any) -> RunnerRows:
    """Rows whose wait between disabling and asking again is none: the tests hold that step with hooks."""

    async def no_wait(seconds: float) -> None:
        assert seconds == SETTLE

    return RunnerRows(None, _kube(), Metrics.create(CollectorRegistry()), sleep=no_wait, **kwargs)  # type: ignore[arg-type]


def _kube() -> Kube:
    return Secrets()  # type: ignore[return-value]


def surplus(name: str) -> Delete:
    return Delete(name, "surplus_idle")


def once(action: Callable[[], None]) -> Callable[[], None]:
    """A hook that acts the first time only."""
    done: list[bool] = []

    def hook() -> None:
        if not done:
            done.append(True)
            action()

    return hook


async def test_a_surplus_runner_gitea_lists_idle_is_disabled_then_goes_with_its_row(
    gitea: tuple[FakeGitea, str],
) -> None:
    fake, url = gitea
    idle = fake.add_runner("builders-w-aaaaaa")
    other = fake.add_runner("builders-w-bbbbbb")
    seen: list[bool] = []
    fake.after["org_runner_delete"] = lambda: seen.append(fake.requests["org_runner_disable"] == 1)
    vetted, _ = await vet(url, [surplus("builders-w-aaaaaa")])
    assert vetted.allowed == [surplus("builders-w-aaaaaa")] and vetted.unlisted == []
    assert fake.deleted == [idle] and other in fake.runners and not fake.runners[other]["disabled"]
    assert seen == [True], "disabled before its row was deleted"


@pytest.mark.parametrize("now_busy", [False, True])
async def test_a_name_given_again_is_asked_about_by_the_live_runners_row_not_the_one_left_behind(
    gitea: tuple[FakeGitea, str], now_busy: bool
) -> None:
    """A runner name comes back once its earlier runner's Job and Pods are gone; a row that runner left
    behind (offline) is listed after the live runner's (Gitea lists the last seen online first). The live
    row decides: busy, the runner stays; idle, that row is disabled and deleted, the left one untouched."""
    fake, url = gitea
    left = fake.add_runner("builders-7-0", status="offline")
    live = fake.add_runner("builders-7-0", status="online", busy=now_busy)
    vetted, _ = await vet(url, [Delete("builders-7-0", "job_over", 7)])
    assert vetted.allowed == ([] if now_busy else [Delete("builders-7-0", "job_over", 7)])
    assert fake.deleted == ([] if now_busy else [live]) and not fake.runners[left]["disabled"]


@pytest.mark.parametrize("how", ["busy flag", "in_progress job"])
@pytest.mark.parametrize("reason", ["surplus_idle", "pending_timeout", "job_over"])
async def test_a_runner_gitea_sees_running_a_job_stays_whatever_the_reason(
    gitea: tuple[FakeGitea, str], how: str, reason: str
) -> None:
    fake, url = gitea
    runner = fake.add_runner("builders-7-0", busy=how == "busy flag")
    if how == "in_progress job":  # a silent step: no report for 10 s, so `busy` reads false
        job = fake.add_job(7, repo="acme/widgets", status="in_progress")
        job.update(runner_id=runner, runner_name="builders-7-0")
    vetted, rows = await vet(url, [Delete("builders-7-0", reason, 7)], now=100.0)
    assert vetted.allowed == [] and fake.deleted == [] and not fake.runners[runner]["disabled"]
    assert rows.busy("ci", "builders-7-0"), "it counts as busy without asking Gitea again"
    rows.clock = lambda: 131.0
    assert not rows.busy("ci", "builders-7-0"), "then Gitea is asked again"


async def test_a_runner_handed_a_job_while_its_deletion_is_decided_keeps_it(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    runner = fake.add_runner("builders-w-aaaaaa")

    def handed_a_job() -> None:  # Gitea hands the idle runner a job just after saying it runs none
        job = fake.add_job(9, repo="acme/widgets", status="in_progress")
        job.update(runner_id=runner, runner_name="builders-w-aaaaaa")

    fake.after["org_jobs"] = once(handed_a_job)
    vetted, rows = await vet(url, [surplus("builders-w-aaaaaa")], now=5.0)
    assert vetted.allowed == [] and fake.deleted == [], "the runner runs the job it took to its end"
    assert fake.runners[runner]["disabled"], "and takes no other: it stays disabled"
    assert rows.busy("ci", "builders-w-aaaaaa")


async def test_before_gitea_1_26_an_idle_runner_goes_without_being_disabled(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    fake.disable_supported = False
    idle = fake.add_runner("builders-w-aaaaaa")
    vetted, _ = await vet(url, [surplus("builders-w-aaaaaa")])
    assert vetted.allowed == [surplus("builders-w-aaaaaa")] and fake.deleted == [idle]


async def test_a_runner_disabled_but_not_confirmed_idle_stays_due_for_deletion(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    runner = fake.add_runner("builders-w-aaaaaa")

    def gitea_goes_down() -> None:
        fake.fail_with = 503

    fake.after["org_runner_disable"] = gitea_goes_down
    vetted, rows = await vet(url, [surplus("builders-w-aaaaaa")])
    assert vetted.allowed == [] and fake.runners[runner]["disabled"] and fake.deleted == []
    assert rows.still_retiring(GROUP, {"builders-w-aaaaaa"}) == [surplus("builders-w-aaaaaa")], "due though unplanned"
    fake.fail_with = None
    fake.after.clear()
    vetted, _ = await vet(url, rows.still_retiring(GROUP, {"builders-w-aaaaaa"}), rows=rows)
    assert vetted.allowed == [surplus("builders-w-aaaaaa")] and fake.deleted == [runner]
    assert rows.still_retiring(GROUP, {"builders-w-aaaaaa"}) == []
    rows.retiring[(GROUP.uid, "builders-w-gone00")] = surplus("builders-w-gone00")
    other = GroupObject("ci", "others", "u-2", 1, {}, {})
    rows.retiring[(other.uid, "others-w-000000")] = surplus("others-w-000000")
    assert rows.still_retiring(GROUP, set()) == [], "a runner whose Job is gone is forgotten"
    assert rows.still_retiring(other, {"others-w-000000"}) == [surplus("others-w-000000")], "another group's kept"


@pytest.mark.parametrize("reason", ["surplus_idle", "pending_timeout", "job_over"])
async def test_nothing_goes_when_gitea_cannot_answer(gitea: tuple[FakeGitea, str], reason: str) -> None:
    fake, url = gitea
    fake.add_runner("builders-3-0")
    fake.fail_with = 503
    vetted, _ = await vet(url, [Delete("builders-3-0", reason, 3)])
    assert vetted.allowed == [], "Gitea unreachable: the runner is kept and asked about later"


async def test_a_repo_groups_runner_registered_with_an_org_token_is_found_in_the_org(
    gitea: tuple[FakeGitea, str],
) -> None:
    fake, url = gitea
    # The group serves one repository, but its runners registered with the org's token: org runners,
    # which the repository's runner list never shows. This one runs a job (a silent step) of another
    # repository of the org.
    runner = fake.add_runner("builders-w-aaaaaa", scope=("org", "acme"))
    job = fake.add_job(11, repo="acme/other", status="in_progress")
    job.update(runner_id=runner, runner_name="builders-w-aaaaaa")
    repo_group: dict[str, Any] = {"scope": "repo", "repo": "acme/widgets"}
    vetted, _ = await vet(url, [surplus("builders-w-aaaaaa")], **repo_group)
    assert vetted.allowed == [] and fake.deleted == [], "busy in the org: kept"
    job.update(status="completed", conclusion="success")
    vetted, _ = await vet(url, [surplus("builders-w-aaaaaa")], **repo_group)
    assert vetted.allowed == [surplus("builders-w-aaaaaa")] and fake.deleted == [runner], "idle: deleted where it is"


@pytest.mark.parametrize("reason", ["pending_timeout", "job_over"])
async def test_a_runner_never_registered_or_removed_with_its_job_goes(
    gitea: tuple[FakeGitea, str], reason: str
) -> None:
    fake, url = gitea
    fake.add_runner("someone-elses-runner")
    fake.refused = {"global_runners"}
    vetted, _ = await vet(url, [Delete("builders-4-0", reason, 4)])
    assert vetted.allowed == [Delete("builders-4-0", reason, 4)], (
        "its scope lists no row: its Pod never ran, or Gitea removed it"
    )


async def test_a_surplus_runner_no_listable_scope_holds_is_kept_and_reported(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    fake.add_runner("someone-elses-runner")
    vetted, _ = await vet(url, [surplus("builders-w-cccccc")])
    assert vetted.allowed == [surplus("builders-w-cccccc")], "no scope holds it: Gitea removed it after its job"
    fake.refused = {"global_runners"}  # the instance's runners: only a site admin's token lists them
    vetted, _ = await vet(url, [surplus("builders-w-cccccc")])
    assert vetted.allowed == [] and vetted.unlisted == ["builders-w-cccccc"]


@pytest.mark.parametrize("reason", ["surplus_idle", "pending_timeout", "job_over"])
async def test_a_runner_without_a_row_goes_from_a_scope_of_several_pages(
    gitea: tuple[FakeGitea, str], reason: str
) -> None:
    """50 rows or more take several pages: a runner none of them is goes all the same, once a second
    complete listing misses it too."""
    fake, url = gitea
    for i in range(60):
        fake.add_runner(f"other-{i}")
    vetted, _ = await vet(url, [Delete("builders-4-0", reason, 4)])
    assert vetted.allowed == [Delete("builders-4-0", reason, 4)] and vetted.unlisted == []
    assert fake.requests["org_runners"] == 4 and fake.deleted == [], "each listing read twice, two pages each"


async def test_a_row_that_moved_onto_a_page_read_already_is_found_by_the_second_listing(
    gitea: tuple[FakeGitea, str],
) -> None:
    """While a listing of two pages is read, a row on the first page goes and a new runner registers
    (listed last): the total stays, no row comes twice, and the runner's own row, first on page 2, moved
    onto page 1, read already. The second listing finds it: the runner is disabled and its row deleted
    with it, not taken for a runner without a row."""
    fake, url = gitea
    others = [fake.add_runner(f"other-{i}") for i in range(50)]  # page 1 (online rows come first)
    ours = fake.add_runner("builders-w-cccccc")  # the 51st: page 2

    def moved() -> None:
        del fake.runners[others[0]]
        fake.add_runner("newcomer", status="offline")  # never online: listed last

    fake.after["global_runners"] = once(moved)
    vetted, _ = await vet(url, [surplus("builders-w-cccccc")], scope="global", org=None)
    assert vetted.allowed == [surplus("builders-w-cccccc")]
    assert fake.requests["global_runner_disable"] == 1 and fake.deleted == [ours], "asked about, its row deleted"


def job(name: str, finished: str = "") -> JobObject:
    return JobObject("ci", name, "builders", None, 0, finished, "")


async def test_the_sweep_deletes_offline_rows_of_ours_whose_job_is_gone_or_done(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    gone = fake.add_runner("builders-w-000001", status="offline")
    done = fake.add_runner("builders-5-abcd", status="offline")
    keep = [
        fake.add_runner("builders-w-000002", status="offline"),  # its Job still runs (Pod pending, say)
        fake.add_runner("builders-w-000003", status="online"),  # online: not a ghost
        fake.add_runner("builders-w-000004", status="offline"),  # created a moment ago by another replica
        fake.add_runner("laptop-of-someone", status="offline"),  # not ours
        fake.add_runner("builders-nightly", status="offline"),  # not a name we give
    ]
    jobs = {("ci", j.name): j for j in (job("builders-w-000002"), job("builders-5-abcd", "Complete"))}
    scope_groups = [GROUP]
    async with aiohttp.ClientSession() as session:
        rows = runner_rows()
        rows.gitea = GiteaClient(session)
        scope = await _scope(url)
        sweeps = [await gitea_ghosts.sweep(rows, {scope: scope_groups}, jobs, {"u-1": {"builders-w-000004"}})]
        assert fake.deleted == [], "a ghost goes at the second sweep that finds it one"
        sweeps.append(await gitea_ghosts.sweep(rows, {scope: scope_groups}, jobs, {"u-1": {"builders-w-000004"}}))
    assert sweeps == [0, 2] and sorted(fake.deleted) == sorted([gone, done])
    assert all(k in fake.runners for k in keep)


class Interleaved(GiteaClient):
    """A client whose next runners listing first lets `before` happen: what happens between a sweep's
    reads of seats and Jobs and its listing."""

    before: Callable[[], Awaitable[None]] | None = None

    async def runners(self, scope: PollScope) -> RunnersListing:
        hook, self.before = self.before, None
        if hook is not None:
            await hook()
        return await super().runners(scope)


async def test_a_runner_registering_between_a_sweeps_reads_and_its_listing_keeps_its_row(
    gitea: tuple[FakeGitea, str],
) -> None:
    """The sweep is given the seats and Jobs read before it lists the rows (as the poller reads them). A
    runner created in between (a seat taken, then registered: its row offline until it first polls, no
    Job in the cache yet) keeps its row, at that sweep and the next; once its Job is over and its seat
    free, its row is a ghost and goes, at the second sweep that finds it one."""
    fake, url = gitea
    coordination = Coordination(fakeredis.FakeAsyncRedis(server=fakeredis.FakeServer()))
    epoch = await coordination.epoch(new_id="e1")
    name = "builders-w-cccccc"
    jobs: dict[tuple[str, str], JobObject] = {}

    async def created() -> None:
        assert await coordination.take(GROUP.uid, name, maximum=3, epoch=epoch.id, taker="r/1") == "granted"
        fake.add_runner(f"{name}.0badc0de", status="offline")

    async def sweep_once() -> int:  # the poller's order: seats (and Jobs) read, then the sweep lists
        seated = {GROUP.uid: set((await coordination.seats(GROUP.uid)).held)}
        return await gitea_ghosts.sweep(rows, {scope: [GROUP]}, jobs, seated)

    async with aiohttp.ClientSession() as session:
        rows = runner_rows()
        rows.gitea = client = Interleaved(session)
        scope = await _scope(url)
        client.before = created
        sweeps = [await sweep_once(), await sweep_once()]
        assert sweeps == [0, 0] and fake.deleted == [], "its row stays while it is being created"
        jobs[("ci", name)] = dataclasses.replace(job(name), runner_name=f"{name}.0badc0de")
        sweeps.append(await sweep_once())
        jobs[("ci", name)] = dataclasses.replace(jobs[("ci", name)], finished="Complete")
        await coordination.seats(GROUP.uid, free=[name])
        sweeps += [await sweep_once(), await sweep_once()]
    assert sweeps == [0, 0, 0, 0, 1] and len(fake.deleted) == 1 and not fake.runners


async def _scope(url: str) -> Any:
    return await scope_of(_kube(), spec(gitea={"url": url}), "ci")


def test_runner_names_are_traced_back_to_their_group() -> None:
    long = GroupObject("ci", "x" * 70, "u-2", 1, {}, {})
    assert owners("builders-12-ab34", [GROUP, long]) == [GROUP]
    assert owners(job_name(long.name, "w-abcdef"), [GROUP, long]) == [long]  # the name cut to 63
    assert owners("builders-12-ab34-extra", [GROUP]) == []
    assert owners("buildersx-12-ab34", [GROUP]) == []


async def test_the_sweep_and_the_drain_look_in_the_wider_scopes_the_token_can_list(
    gitea: tuple[FakeGitea, str],
) -> None:
    """A repository's group whose runners registered with an org token has org runners: their rows left
    behind are found in the org, by the sweep and by the drain of a deleted group. A wider scope the
    token may not list is skipped: this one is no admin's."""
    fake, url = gitea
    fake.refused.add("global_runners")
    ghost = fake.add_runner("builders-w-000009", scope=("org", "acme"), status="offline")
    left = fake.add_runner("builders-w-000011", scope=("org", "acme"), status="offline")
    elsewhere = fake.add_runner("builders-w-000010", scope=("repo", "acme/other"), status="offline")
    async with aiohttp.ClientSession() as session:
        rows = runner_rows()
        rows.gitea = GiteaClient(session)
        repo_spec = spec(gitea={"url": url}, scope="repo", repo="acme/w")
        scope = await scope_of(_kube(), repo_spec, "ci")
        running = {("ci", "builders-w-000011"): job("builders-w-000011")}
        removed = [await gitea_ghosts.sweep(rows, {scope: [GROUP]}, running, {}) for _ in range(2)]
        assert removed == [0, 1] and fake.deleted == [ghost]
        assert await gitea_ghosts.clear(rows, GROUP, repo_spec) == []
    assert fake.deleted == [ghost, left], "the drain cleared the one whose Job ran during the sweep"
    assert elsewhere in fake.runners, "a scope no group of ours has, nor the token may list, is not looked at"


async def test_deleting_a_group_never_touches_the_rows_of_a_group_of_its_name_in_another_namespace(
    gitea: tuple[FakeGitea, str],
) -> None:
    """Issue 35: the drain of ns-a/ci matched rows by the group's name, so it deleted the rows of ns-b/ci's
    live runners registered in the same org. Runner names carry their group's key now."""
    fake, url = gitea
    a = GroupObject(namespace="ci", name="builders", uid="u-a", generation=1, spec={}, status={}, deleting=True)
    b = GroupObject(namespace="team-b", name="builders", uid="u-b", generation=1, spec={}, status={})
    mine = fake.add_runner(runner_name("builders-w-aaaaaa", group=group_key("ci", "builders")), status="offline")
    theirs = fake.add_runner(runner_name("builders-12-0", group=group_key("team-b", "builders")), status="offline")
    busy = fake.add_runner(runner_name("builders-13-0", group=group_key("team-b", "builders")), busy=True)
    async with aiohttp.ClientSession() as session:
        rows = runner_rows()
        rows.gitea = GiteaClient(session)
        assert await gitea_ghosts.clear(rows, a, spec(gitea={"url": url})) == []
    assert fake.deleted == [mine]
    assert {theirs, busy} <= set(fake.runners), "the other namespace's rows, idle or busy, are left"
    assert owners_of_runner(fake.runners[theirs]["name"], [a, b]) == [b]
    older = "builders-12-0.0123abcd"  # named before the group key: only the Job's name tells
    assert owners_of_runner(older, [a, b]) == [a, b]
