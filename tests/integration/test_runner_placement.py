"""Where runners run is the admin's, against a REAL kube-apiserver + etcd and a real redis-server: a group
placing its runners itself is refused unless the admin allows it, the runner Jobs the controller creates carry
their namespace's nodeSelector and tolerations (GRS_RUNNER_PLACEMENT) over a podTemplate's own, and a new
placement replaces the idle warm runner."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.fake_gitea import FakeGitea
from tests.integration.test_reconciler import (
    API_TOKEN,
    MakeServer,
    create_group,
    eventually,
    group_status,
    namespace,
    passes,
    queue,
    runner_jobs,
    running_controller,
)
from tests.kube_cluster import KubeCluster, runner_of
from tests.redis_server import RedisServer

pytestmark = pytest.mark.kube
TEAM = {"key": "dedicated", "operator": "Equal", "value": "team-a", "effect": "NoExecute"}
OWN = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:  # a real one only, as the controller's
    client = Redis.from_url(redis_server.url)
    await client.flushall()
    yield client
    await client.aclose()


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = job["spec"]["template"]["spec"]
    return pod


async def test_a_group_placing_its_runners_is_refused_and_the_admins_placement_goes_over_its_runners(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    ns = namespace(kube)
    own = {"nodeSelector": {"pool": "mine", "disk": "ssd"}, "tolerations": [OWN], "containers": [{"name": "runner"}]}
    create_group(kube, ns, "placed", defaultLabels=[], podTemplate={"spec": own})
    await queue(redis, 61, labels=["k8s"])
    placement = {
        "default": {"nodeSelector": {"pool": "shared"}},
        "namespaces": {ns: {"nodeSelector": {"pool": "team-a"}, "tolerations": [TEAM]}},
    }
    settings: dict[str, Any] = {"runner_placement": json.dumps(placement)}
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **settings) as controller:
        ready = await eventually(lambda: group_status(kube, ns, "placed").get("conditions", {}).get("Ready"))
        await passes(controller)
        assert not runner_jobs(kube, ns), "no runner of a refused group"
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec"), ready
    refused = "not allowed by the install's runner Pod policy: spec.podTemplate.spec"
    assert f"{refused}.nodeSelector (GRS_RUNNER_POD_ALLOW_SCHEDULING)" in ready["message"], ready["message"]
    assert f"{refused}.tolerations (GRS_RUNNER_POD_ALLOW_SCHEDULING)" in ready["message"], ready["message"]
    async with running_controller(kube.kubeconfig, redis_server.url, ns, runner_pod_allow_scheduling=True, **settings):
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
    assert pod_of(job)["nodeSelector"] == {"pool": "team-a", "disk": "ssd"}, "the admin's keys win"
    assert pod_of(job)["tolerations"] == [OWN, TEAM]


async def test_a_new_placement_of_its_namespace_replaces_the_idle_warm_runner(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """The template hash covers the namespace's placement: a warm runner made before the admin moved its
    namespace is outdated and replaced (its row asked about and deleted in Gitea first); one of another
    namespace's placement is not. No job is queued (`redis` is emptied): the group's one runner is its warm one."""
    fake = FakeGitea(token=API_TOKEN)
    url = str((await aiohttp_server(fake.app())).make_url("")).rstrip("/")
    ns = namespace(kube)
    create_group(kube, ns, "warm", labels=[], defaultLabels=[], minIdleRunners=1, gitea={"url": url})
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url) as controller:
        (before,) = await eventually(lambda: runner_jobs(kube, ns))
        await passes(controller)  # its create done, credential and all (a create cut short deletes its Job)
    row = fake.add_runner(runner_of(before))
    assert "nodeSelector" not in pod_of(before)
    elsewhere = json.dumps({"namespaces": {"another-namespace": {"nodeSelector": {"pool": "team-b"}}}})
    options: dict[str, Any] = {"gitea_url": url, "runner_placement": elsewhere}
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **options) as controller:
        await passes(controller)
        assert [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [before["metadata"]["name"]], "not its own"
    moved = json.dumps({"namespaces": {ns: {"nodeSelector": {"pool": "team-a"}, "tolerations": [TEAM]}}})
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url, runner_placement=moved):

        def replaced() -> list[dict[str, Any]]:
            jobs = [j for j in runner_jobs(kube, ns) if not j["metadata"].get("deletionTimestamp")]
            gone = before["metadata"]["name"] not in [j["metadata"]["name"] for j in jobs]
            return jobs if gone and len(jobs) == 1 else []

        (after,) = await eventually(replaced)
    assert pod_of(after)["nodeSelector"] == {"pool": "team-a"} and pod_of(after)["tolerations"] == [TEAM]
    assert fake.deleted == [row], "the outdated runner's row went with it"
