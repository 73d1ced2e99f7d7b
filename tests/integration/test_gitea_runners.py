"""gitea_runners.py against the fake Gitea (every answer checked against Gitea's OpenAPI spec): which
runner deletions go ahead, the runner rows deleted with them, and the ghost sweep."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry

from reconciler.gitea_runners import RunnerRows, owners, scope_of
from reconciler.giteaapi import GiteaClient
from reconciler.kube import Kube
from reconciler.manifests import job_name
from reconciler.metrics import Metrics
from reconciler.objects import GroupObject, JobObject
from reconciler.plan import Delete
from tests.fake_gitea import FakeGitea
from tests.groups import spec

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


async def vet(url: str, deletes: list[Delete], *, now: float = 0.0) -> tuple[list[Delete], RunnerRows]:
    async with aiohttp.ClientSession() as session:
        rows = RunnerRows(GiteaClient(session), _kube(), Metrics.create(CollectorRegistry()), clock=lambda: now)
        return await rows.vet(GROUP, spec(gitea={"url": url}), deletes), rows


def _kube() -> Kube:
    return Secrets()  # type: ignore[return-value]


def surplus(name: str) -> Delete:
    return Delete(name, "surplus_idle")


async def test_a_surplus_runner_gitea_lists_idle_goes_with_its_row(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    idle = fake.add_runner("builders-w-aaaaaa")
    other = fake.add_runner("builders-w-bbbbbb")
    allowed, _ = await vet(url, [surplus("builders-w-aaaaaa")])
    assert allowed == [surplus("builders-w-aaaaaa")]
    assert fake.deleted == [idle] and other in fake.runners


@pytest.mark.parametrize("how", ["busy flag", "in_progress job"])
async def test_a_surplus_runner_gitea_sees_running_a_job_stays_and_counts_as_busy(
    gitea: tuple[FakeGitea, str], how: str
) -> None:
    fake, url = gitea
    runner = fake.add_runner("builders-7-abcd", busy=how == "busy flag")
    if how == "in_progress job":  # a silent step: no report for 10 s, so `busy` reads false
        job = fake.add_job(7, repo="acme/widgets", status="in_progress")
        job.update(runner_id=runner, runner_name="builders-7-abcd")
    allowed, rows = await vet(url, [surplus("builders-7-abcd")], now=100.0)
    assert allowed == [] and fake.deleted == []
    assert rows.busy("ci", "builders-7-abcd"), "it counts as busy without asking Gitea again"
    rows.clock = lambda: 131.0
    assert not rows.busy("ci", "builders-7-abcd"), "then Gitea is asked again"


async def test_nothing_surplus_goes_when_gitea_cannot_answer(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    fake.add_runner("builders-w-aaaaaa")
    fake.fail_with = 503
    over = Delete("builders-3-abcd", "job_over", 3)
    allowed, _ = await vet(url, [surplus("builders-w-aaaaaa"), over])
    assert allowed == [over], "a runner whose job is over goes anyway; its row is swept later"


async def test_a_runner_missing_from_a_complete_listing_goes_and_from_a_paged_one_stays(
    gitea: tuple[FakeGitea, str],
) -> None:
    fake, url = gitea
    fake.add_runner("someone-elses-runner")
    allowed, _ = await vet(url, [surplus("builders-w-cccccc")])
    assert allowed == [surplus("builders-w-cccccc")], "never registered, or Gitea removed it after its job"
    for i in range(60):  # two pages: rows may move between the pages while they are read
        fake.add_runner(f"other-{i}")
    allowed, _ = await vet(url, [surplus("builders-w-cccccc")])
    assert allowed == []


async def test_a_runner_going_for_another_reason_goes_with_its_row(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    row = fake.add_runner("builders-4-abcd", busy=True)  # busy or not: its Pod never ran, or its job is over
    allowed, _ = await vet(url, [Delete("builders-4-abcd", "pending_timeout", 4)])
    assert allowed == [Delete("builders-4-abcd", "pending_timeout", 4)] and fake.deleted == [row]


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
        rows = RunnerRows(GiteaClient(session), _kube(), Metrics.create(CollectorRegistry()))
        scope = await _scope(url)
        removed = await rows.sweep({scope: scope_groups}, jobs, {"u-1": {"builders-w-000004"}})
    assert removed == 2 and sorted(fake.deleted) == sorted([gone, done])
    assert all(k in fake.runners for k in keep)


async def _scope(url: str) -> Any:
    return await scope_of(_kube(), spec(gitea={"url": url}), "ci")


def test_runner_names_are_traced_back_to_their_group() -> None:
    long = GroupObject("ci", "x" * 70, "u-2", 1, {}, {})
    assert owners("builders-12-ab34", [GROUP, long]) == [GROUP]
    assert owners(job_name(long.name, "w-abcdef"), [GROUP, long]) == [long]  # the name cut to 63
    assert owners("builders-12-ab34-extra", [GROUP]) == []
    assert owners("buildersx-12-ab34", [GROUP]) == []
