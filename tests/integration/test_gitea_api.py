"""The Gitea client (`reconciler/gitea/api.py`) against the fake Gitea,
whose every answer is checked against Gitea's OpenAPI spec."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from reconciler.gitea.api import GiteaClient, GiteaError, PollScope, _fitting_jobs
from tests.fake_gitea import FakeGitea

MakeServer = Callable[[web.Application], Awaitable[TestServer]]
TOKEN = "api-token-value"


@pytest.fixture
async def gitea(aiohttp_server: MakeServer) -> tuple[FakeGitea, str]:
    fake = FakeGitea(token=TOKEN)
    server = await aiohttp_server(fake.app())
    return fake, str(server.make_url("")).rstrip("/")


async def client_jobs(url: str, kind: Any, target: str, token: str = TOKEN) -> list[Any]:
    async with aiohttp.ClientSession() as session:
        return (await GiteaClient(session).jobs(PollScope(url, kind, target, token))).jobs


async def test_pages_through_every_queued_and_running_job(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    for i in range(1, 121):
        if i % 3:
            fake.add_job(i, repo="acme/widgets")
        else:  # taken: Gitea lists the runner of its task
            fake.add_job(i, repo="acme/widgets", status="in_progress", runner=(i, "r"))
    fake.add_job(500, repo="acme/widgets", status="waiting")
    fake.add_job(501, repo="acme/widgets", status="completed")
    fake.add_job(502, repo="other/thing")
    jobs = await client_jobs(url, "org", "acme")
    assert sorted(p.job.id for p in jobs) == list(range(1, 121))
    assert {p.repo for p in jobs} == {"acme/widgets"}
    assert fake.requests["org_jobs"] == 3  # 50 + 50 + 20, never one request per job or group


@pytest.mark.parametrize(
    ("kind", "target", "endpoint", "expected"),
    [
        pytest.param("repo", "acme/widgets", "repo_jobs", {1, 2}, id="repo"),
        pytest.param("org", "ACME", "org_jobs", {1, 2, 3}, id="org-case-insensitive"),
        pytest.param("global", "", "admin_jobs", {1, 2, 3, 4}, id="global"),
        pytest.param("user", "alice", "repo_jobs", {4}, id="user"),
    ],
)
async def test_each_scope_uses_its_endpoint(
    gitea: tuple[FakeGitea, str], kind: str, target: str, endpoint: str, expected: set[int]
) -> None:
    fake, url = gitea
    fake.add_job(1, repo="acme/widgets")
    fake.add_job(2, repo="acme/widgets")
    fake.add_job(3, repo="acme/gadgets")
    fake.add_job(4, repo="alice/dotfiles")
    jobs = await client_jobs(url, kind, target)
    assert {p.job.id for p in jobs} == expected
    assert fake.requests[endpoint] >= 1


async def test_a_row_out_of_range_is_left_out_not_the_page(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    for i in (1, 2, 3):
        fake.add_job(i, repo="acme/widgets")
    fake.jobs[2]["labels"] = [""]  # no runner can have an empty label: not a job Gitea would list
    assert sorted(p.job.id for p in await client_jobs(url, "org", "acme")) == [1, 3]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param({"jobs": [], "total_count": -1}, id="envelope"),
        pytest.param({"jobs": "x", "total_count": 1}, id="jobs-not-a-list"),
        pytest.param([], id="not-an-object"),
    ],
)
def test_a_page_that_does_not_fit_is_an_error(body: Any) -> None:
    with pytest.raises(GiteaError, match="does not fit"):
        _fitting_jobs(body)


async def test_errors_are_typed_and_never_show_the_token(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    with pytest.raises(GiteaError) as err:
        await client_jobs(url, "org", "acme", token="wrong")
    assert err.value.status == 401
    fake.fail_with = 429
    with pytest.raises(GiteaError) as err:
        await client_jobs(url, "org", "acme")
    assert err.value.status == 429
    fake.fail_with = 503
    with pytest.raises(GiteaError) as err:
        await client_jobs(url, "org", "acme")
    assert TOKEN not in str(err.value)
    assert TOKEN not in repr(PollScope(url, "org", "acme", TOKEN))
    with pytest.raises(GiteaError) as err:
        await client_jobs("http://127.0.0.1:1", "org", "acme")
    assert err.value.status is None and "ClientConnectorError" in str(err.value)


@pytest.mark.parametrize(
    ("version", "unpaged", "steps", "headers"),
    [
        pytest.param("1.25.0", 60, None, set(), id="1.25: every row without page, steps null, no paging headers"),
        pytest.param("1.26.0", 30, [], {"X-Total-Count", "Link"}, id="1.26: page 1 without page, steps [], headers"),
    ],
)
async def test_fake_reproduces_gitea_quirks(
    gitea: tuple[FakeGitea, str], version: str, unpaged: int, steps: Any, headers: set[str]
) -> None:
    fake, url = gitea
    fake.version = version
    for i in range(1, 61):
        fake.add_job(i, repo="acme/widgets")
    async with aiohttp.ClientSession() as s:
        auth = {"Authorization": f"token {TOKEN}"}
        async with s.get(f"{url}/api/v1/orgs/acme/actions/jobs", headers=auth) as r:
            assert len((await r.json())["jobs"]) == unpaged
        async with s.get(f"{url}/api/v1/orgs/acme/actions/jobs?page=1&limit=100", headers=auth) as r:
            body = await r.json()
            assert (len(body["jobs"]), body["total_count"]) == (50, 60)
            assert body["jobs"][0]["steps"] == steps
            assert {h for h in ("X-Total-Count", "Link") if h in r.headers} == headers
        for status, code in (("bogus", 400), ("success", 200), ("timed_out", 200), ("action_required", 200)):
            async with s.get(f"{url}/api/v1/orgs/acme/actions/jobs?status={status}", headers=auth) as r:
                assert r.status == code, status
