"""One token, on a real API server: a RunnerGroup without `registrationToken` gets runners registered with
its scope's own registration token, which the controller fetches from the fake Gitea with the group's
API token; a user group whose Secret gives the org's registration token starts nothing, keeps no row in
Gitea, and says `RegistrationScopeMismatch` naming both scopes, until the token goes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from redis.asyncio import Redis

from reconciler.gitea.api import GiteaClient
from reconciler.gitea.register import registrar_of
from tests.fake_gitea import FakeGitea
from tests.integration.test_reconciler import (
    API_TOKEN,
    REG_TOKEN,
    RG,
    eventually,
    group,
    group_status,
    namespace,
    passes,
    queue,
    runner_jobs,
    running_controller,
)
from tests.kube_cluster import KubeCluster, api_request, runner_of
from tests.redis_server import RedisServer

pytestmark = pytest.mark.kube
MakeServer = Callable[[web.Application], Awaitable[TestServer]]
USER: dict[str, Any] = {"scope": "user", "user": "acme", "org": None, "labels": [], "defaultLabels": []}


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:  # the controller's, a real one
    client = Redis.from_url(redis_server.url)
    await client.flushall()
    yield client
    await client.aclose()


def create(kube: KubeCluster, ns: str, name: str, *, url: str, registration_token: bool) -> None:
    body = group(name, gitea={"url": url}, **USER)
    if not registration_token:
        del body["spec"]["registrationToken"]
    status, answer = api_request(kube, "POST", RG.format(ns=ns), body)
    assert status == 201, answer


def admitted(kube: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    cond: dict[str, Any] | None = group_status(kube, ns, name)["conditions"].get("RunnersAdmitted")
    return cond


async def test_a_group_without_a_registration_token_registers_its_runner_with_its_scopes_own(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    fake = FakeGitea(token=API_TOKEN)
    url = str((await aiohttp_server(fake.app())).make_url("")).rstrip("/")
    ns = namespace(kube)
    create(kube, ns, "mine", url=url, registration_token=False)
    await queue(redis, 901, labels=[], repo="acme/widgets")
    async with aiohttp.ClientSession() as session:
        registrar = registrar_of(GiteaClient(session))
        async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url, registrar=registrar):
            (job,) = await eventually(lambda: runner_jobs(kube, ns))
    (row,) = fake.runners.values()
    assert (row["name"], row["_scope"]) == (runner_of(job), ("user", "acme"))
    assert fake.requests["user_registration_token"] == 1
    assert REG_TOKEN not in fake.registration_tokens, "the Secret's registration token was never used"


async def test_a_user_group_given_the_orgs_registration_token_starts_nothing_and_names_both_scopes(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """The runner registered with the org's token is an org runner: its row is deleted, no runner Job is
    made, and the group says why, Ready too; the token is not tried again pass after pass. Once the group
    drops `registrationToken`, its runner registers as the user's and starts."""
    fake = FakeGitea(token=API_TOKEN, registration_token=REG_TOKEN)  # the Secret's token is the org's
    url = str((await aiohttp_server(fake.app())).make_url("")).rstrip("/")
    ns = namespace(kube)
    create(kube, ns, "given", url=url, registration_token=True)
    await queue(redis, 902, labels=[], repo="acme/widgets")
    async with aiohttp.ClientSession() as session:
        registrar = registrar_of(GiteaClient(session))
        async with running_controller(
            kube.kubeconfig, redis_server.url, ns, gitea_url=url, registrar=registrar
        ) as controller:
            cond = await eventually(lambda: (c := admitted(kube, ns, "given")) and c["status"] == "False" and c)
            ready = group_status(kube, ns, "given")["conditions"]["Ready"]
            await passes(controller)
            assert not runner_jobs(kube, ns) and not fake.runners and fake.deleted == [1]
            assert fake.requests["register"] == 1, "one runner registered with the token, not one per pass"
            patch = {"spec": {"registrationToken": None}}
            path = RG.format(ns=ns) + "/given"
            assert api_request(kube, "PATCH", path, patch, content_type="application/merge-patch+json")[0] == 200
            (job,) = await eventually(lambda: runner_jobs(kube, ns))
            await eventually(lambda: (c := admitted(kube, ns, "given")) and c["status"] == "True")
    assert cond["reason"] == ready["reason"] == "RegistrationScopeMismatch", (cond, ready)
    assert "is not of the group's scope (user acme)" in cond["message"], cond
    assert "registered in org acme; its row was deleted through org acme" in cond["message"], cond
    assert f"Secret {ns}/gitea, key reg" in cond["message"] and REG_TOKEN not in cond["message"]
    assert [r["_scope"] for r in fake.runners.values()] == [("user", "acme")]
    assert runner_of(job) == next(iter(fake.runners.values()))["name"]
