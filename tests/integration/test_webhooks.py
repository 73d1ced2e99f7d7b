"""The webhooks the controller installs (GRS_WEBHOOK_MANAGE), against a REAL kube-apiserver + etcd, a real
redis-server and a fake Gitea held to Gitea's spec: one per proven scope, signed with that scope's own
secret, which the receiver accepts for that scope only; gone with the scope's last group; a token that
may not install one is reported in the group's own status and costs nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from tests.fake_gitea import FakeGitea
from tests.fake_gitea_hooks import FakeHooks
from tests.integration.test_app import MakeClient
from tests.integration.test_reconciler import (
    API_TOKEN,
    RG,
    MakeServer,
    condition,
    create_group,
    eventually,
    namespace,
    running_controller,
)
from tests.jobs import payload, signed
from tests.kube_cluster import KubeCluster, api_request
from tests.redis_server import RedisServer
from webhook_scaler import hook_keys
from webhook_scaler.app import create_app
from webhook_scaler.settings import Settings

pytestmark = pytest.mark.kube
KEY = "the-webhook-key-of-this-install-0123"
HOOK_URL = "https://runners.example.com/webhook"


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:  # a real one only, as the controller's
    client = Redis.from_url(redis_server.url)
    await client.flushall()
    yield client
    await client.aclose()


async def gitea(aiohttp_server: MakeServer) -> tuple[FakeGitea, FakeHooks, str]:
    fake = FakeGitea(token=API_TOKEN)
    hooks = FakeHooks(fake)
    server = await aiohttp_server(hooks.add_to(fake.app()))
    return fake, hooks, str(server.make_url("")).rstrip("/")


def managed(url: str, **kw: Any) -> dict[str, Any]:
    return {
        "webhook_manage": True,
        "webhook_url": HOOK_URL,
        "webhook_key": KEY,
        "gitea_url": url,
        "poll_interval": 1,
    } | kw


def installed(kube: KubeCluster, ns: str, name: str) -> dict[str, Any] | None:
    found = condition(kube, ns, name, "WebhookInstalled")
    return found if found is not None and found["status"] == "True" else None


async def test_one_webhook_per_proven_scope_signed_for_that_scope_and_gone_with_its_last_group(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer, aiohttp_client: MakeClient
) -> None:
    fake, hooks, url = await gitea(aiohttp_server)
    admins = hooks.add("org", "acme", url="https://chat.example.com/hook")  # the org's own: never ours to touch
    oldest = hooks.add("org", "acme", url=HOOK_URL, secret="stale")  # two replicas each made one
    hooks.add("org", "acme", url=HOOK_URL, secret="stale")
    ns = namespace(kube)
    for name, scope in (("a", {}), ("b", {}), ("c", {"scope": "repo", "repo": "acme/widgets"})):
        create_group(kube, ns, name, gitea={"url": url}, labels=[name], **scope)
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **managed(url)):
        await eventually(lambda: all(installed(kube, ns, name) for name in "abc"))
        ours = [h for h in hooks.of("org", "acme") if h["config"]["url"] == HOOK_URL]
        assert [h["id"] for h in ours] == [oldest], "one webhook per scope: the oldest stays"
        assert ours[0]["events"] == ["workflow_job"] and ours[0]["active"]
        assert hooks.secrets[oldest] == hook_keys.secret(KEY.encode(), instance="", kind="owner", target="acme")
        assert hooks.of("org", "acme")[0]["id"] == admins and hooks.secrets[admins] == ""
        (repo_hook,) = hooks.of("repo", "acme/widgets")
        assert hooks.secrets[repo_hook["id"]] == hook_keys.secret(
            KEY.encode(), instance="", kind="repo", target="acme/widgets"
        )

        # What Gitea signs with the org's webhook secret, the receiver takes for acme, and for acme only.
        receiver = await aiohttp_client(
            create_app(Settings(webhook_key=KEY), redis=redis, registry=CollectorRegistry())
        )
        for repo, status in (("acme/gadgets", 200), ("globex/app", 401)):
            raw, headers = signed(payload("queued", repo=repo), secret=hooks.secrets[oldest])
            assert (await receiver.post("/webhook", data=raw, headers=headers)).status == status, repo

        assert api_request(kube, "DELETE", f"{RG.format(ns=ns)}/a")[0] == 200
        await eventually(lambda: fake.requests["org_hooks"] >= 3)  # looked again; b still serves acme
        assert [h["id"] for h in hooks.of("org", "acme")] == [admins, oldest]
        assert api_request(kube, "DELETE", f"{RG.format(ns=ns)}/b")[0] == 200
        await eventually(lambda: [h["id"] for h in hooks.of("org", "acme")] == [admins], timeout=30)
        assert len(hooks.of("repo", "acme/widgets")) == 1, "c's repository keeps its own"
    assert not fake.errors, fake.errors


async def test_a_token_that_may_not_install_the_webhook_says_so_in_its_own_group_only(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    fake, hooks, url = await gitea(aiohttp_server)
    hooks.owned = {("repo", "acme/widgets")}  # a repository admin's token: no say over the org's webhooks
    ns = namespace(kube)
    create_group(kube, ns, "org", gitea={"url": url}, labels=["a"])
    create_group(kube, ns, "repo", gitea={"url": url}, labels=["b"], scope="repo", repo="acme/widgets")
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **managed(url)):
        refused = await eventually(
            lambda: (c := condition(kube, ns, "org", "WebhookInstalled")) and c["status"] == "False" and c
        )
        await eventually(lambda: installed(kube, ns, "repo"))
        assert refused["reason"] == "WebhookRefused" and "HTTP 403" in refused["message"], refused
        assert API_TOKEN not in refused["message"]
        ready = condition(kube, ns, "org", "Ready")
        assert ready is not None and ready["status"] == "True", "the poll serves the org without a webhook"
    assert not hooks.of("org", "acme") and not fake.errors


async def test_without_webhook_manage_gitea_hears_of_no_webhook(
    kube: KubeCluster, redis_server: RedisServer, aiohttp_server: MakeServer
) -> None:
    fake, hooks, url = await gitea(aiohttp_server)
    ns = namespace(kube)
    create_group(kube, ns, "org", gitea={"url": url})
    async with running_controller(
        kube.kubeconfig, redis_server.url, ns, gitea_url=url, poll_enabled=True, poll_interval=1
    ):
        await eventually(lambda: condition(kube, ns, "org", "GiteaReachable"))
        assert condition(kube, ns, "org", "WebhookInstalled") is None
    assert not [k for k in fake.requests if "hook" in k] and not hooks.hooks
