"""A user scope's poll sees only the repositories its API token can see: the jobs of the user's other
repositories (private ones of a token that may not read them) are never marked gone for missing from
it. The Gitea client against the fake Gitea, its listing recorded as the poller does
(`reconciler/loop/rounds/poller.py`), on fakeredis and on a real redis-server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from redis.asyncio import Redis

from reconciler.gitea.api import GiteaClient, JobsListing, PollScope
from tests.fake_gitea import FakeGitea
from tests.jobs import model
from webhook_scaler.store.jobs.model import JobUpdate, Scope
from webhook_scaler.store.jobs.records import JobStore

MakeServer = Callable[[web.Application], Awaitable[TestServer]]
TOKEN = "api-token-value"


@pytest.fixture
async def gitea(aiohttp_server: MakeServer) -> tuple[FakeGitea, str]:
    fake = FakeGitea(token=TOKEN)
    server = await aiohttp_server(fake.app())
    return fake, str(server.make_url("")).rstrip("/")


async def listing(url: str) -> JobsListing:
    async with aiohttp.ClientSession() as session:
        return await GiteaClient(session).jobs(PollScope(url, "user", "alice", TOKEN))


async def poll(store: JobStore, url: str) -> int:
    """One poll of the user scope, recorded as the poller records it: how many jobs it marked gone."""
    listed = await listing(url)
    updates = [JobUpdate.from_job(p.job, repo_full_name=p.repo) for p in listed.jobs]
    since = await store.now_ms()
    _added, dropped = await store.sync_polled(
        Scope("owner", "alice"), updates, polled_since_ms=since, complete=listed.complete, repos=listed.repos
    )
    return dropped


async def test_a_user_listing_says_which_repositories_it_read(gitea: tuple[FakeGitea, str]) -> None:
    fake, url = gitea
    fake.add_job(1, repo="alice/Dotfiles")
    fake.add_job(2, repo="alice/secret")
    fake.private.add("alice/secret")
    got = await listing(url)
    assert [p.job.id for p in got.jobs] == [1]
    assert got.complete and got.repos == frozenset({"alice/dotfiles"})


async def test_the_jobs_of_repositories_the_token_cannot_see_are_never_marked_gone(
    gitea: tuple[FakeGitea, str], redis: Redis
) -> None:
    """Webhooks recorded a queued job in each of alice's repositories; the poll's token sees only the
    public one. Two complete polls that miss a job mark it gone, but only in the repositories they
    read: the private repository's job still wants a runner."""
    fake, url = gitea
    store = JobStore(redis)
    fake.add_job(1, repo="alice/dotfiles")  # Gitea's listing makes the fake know the repository
    fake.jobs.pop(1)  # ... and then the job is gone (its completed webhook lost)
    fake.add_job(2, repo="alice/secret")
    fake.private.add("alice/secret")
    for job_id, repo in ((1, "alice/dotfiles"), (2, "alice/secret")):
        await store.record(JobUpdate.from_payload(model("queued", job_id=job_id, repo=repo)))
    assert await poll(store, url) + await poll(store, url) == 1, "two misses: gone"
    assert [j.job_id for j in await store.queued()] == [2]
