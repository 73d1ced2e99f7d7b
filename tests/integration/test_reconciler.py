"""The reconciler against a REAL kube-apiserver + etcd and a real redis-server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import functools
import inspect
import io
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, cast

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry
from redis.asyncio import Redis

from reconciler.gitea.api import GiteaClient
from reconciler.gitea.register import TIMEOUT_S as REGISTER_TIMEOUT_S
from reconciler.gitea.register import Registration
from reconciler.kube.api import Kube, api_client
from reconciler.kube.egress import DIRECT, Egress
from reconciler.kube.informers import Informer
from reconciler.kube.manifests import GROUP_LABEL, JOB_ID_ANNOTATION, GroupRef, build_job
from reconciler.kube.objects import job_from
from reconciler.kube.openapi import pod_schema, shipped_pod_schema
from reconciler.kube.runner_cache import RunnerCache
from reconciler.loop.rounds.controller import Controller
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.settings import Settings
from tests.fake_gitea import FakeGitea, FakeRegistrar
from tests.fake_tenants import FakeProver, Tenant, TenantGitea
from tests.groups import REFUSED, changed, operator_form, spec_dict
from tests.groups import spec as spec_model
from tests.jobs import model
from tests.kube_cluster import KubeCluster, api_request, complete_job, fail_job, runner_of
from tests.redis_server import RedisServer
from webhook_scaler.store.jobs.model import JobUpdate, Scope
from webhook_scaler.store.jobs.records import JobStore
from webhook_scaler.store.seats.coordination import ABANDONED_AFTER_S, CLAIM_PENDING_S, Coordination

pytestmark = pytest.mark.kube
API_TOKEN = "gitea-api-token-value"
REG_TOKEN = "registration-token-value-0123456789abcdef"
RG = "/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups"
DEFAULT_GITEA = spec_dict()["gitea"]["url"]  # the groups' Gitea, the default instance (GRS_GITEA_URL)


def namespace(kube: KubeCluster) -> str:
    ns = f"t-{uuid.uuid4().hex[:8]}"
    assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
    secret = {
        "metadata": {"name": "gitea"},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in {"api": API_TOKEN, "reg": REG_TOKEN}.items()},
    }
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", secret)[0] == 201
    return ns


def _url(server: TestServer) -> str:
    """A fake Gitea's URL as its groups name it."""
    return str(server.make_url("")).rstrip("/")


def group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "gitea.bpg.pw/v1alpha1",
        "kind": "RunnerGroup",
        "metadata": {"name": name},
        "spec": spec_dict(**spec),
    }


def create_group(kube: KubeCluster, ns: str, name: str, **spec: Any) -> dict[str, Any]:
    status, body = api_request(kube, "POST", RG.format(ns=ns), group(name, **spec))
    assert status == 201, body
    return body  # type: ignore[no-any-return]


def group_status(kube: KubeCluster, ns: str, name: str) -> dict[str, Any]:
    """A RunnerGroup's status, with `conditions` turned into a dict by type."""
    _, body = api_request(kube, "GET", RG.format(ns=ns) + "/" + name)
    status: dict[str, Any] = dict(body.get("status") or {})
    status["conditions"] = {c["type"]: c for c in status.get("conditions") or []}
    return status


def condition(kube: KubeCluster, ns: str, name: str, kind: str) -> dict[str, Any] | None:
    """A RunnerGroup's condition of that type, if it has one."""
    found: dict[str, Any] | None = group_status(kube, ns, name)["conditions"].get(kind)
    return found


def events(kube: KubeCluster, ns: str, reason: str) -> list[dict[str, Any]]:
    """The namespace's Events with this reason."""
    _, body = api_request(kube, "GET", f"/api/v1/namespaces/{ns}/events")
    return [e for e in body["items"] if e["reason"] == reason]


def runner_jobs(kube: KubeCluster, ns: str) -> list[dict[str, Any]]:
    status, body = api_request(kube, "GET", f"/apis/batch/v1/namespaces/{ns}/jobs")
    assert status == 200
    return body["items"]  # type: ignore[no-any-return]


async def eventually(check: Callable[[], Any], *, timeout: float = 20.0) -> Any:
    """Poll `check` (a function, or one returning an awaitable) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"condition not met within {timeout}s (last: {last!r})")


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[Redis]:  # a real one only, here
    client = Redis.from_url(redis_server.url)
    await client.flushall()
    yield client
    await client.aclose()


def _stacks() -> str:
    """Where every pending task of this loop is: what a hung shutdown is waiting on."""
    out = io.StringIO()
    for t in asyncio.all_tasks():
        if not t.done():
            t.print_stack(limit=12, file=out)
    return out.getvalue()


def group_faults(controller: Controller) -> dict[tuple[str, str], float]:
    """The exceptions groups' objects raised that the controller kept to them (`grs_group_faults`)."""
    samples = [s for metric in controller.metrics.group_faults.collect() for s in metric.samples]
    return {(s.labels["group"], s.labels["stage"]): s.value for s in samples if s.name.endswith("_total") and s.value}


@contextlib.asynccontextmanager
async def running_controller(
    kubeconfig: Path, redis_url: str, ns: str, *, egress: Egress = DIRECT, **kw: Any
) -> AsyncIterator[Controller]:
    registrar = kw.pop("registrar", None) or FakeRegistrar(tokens={REG_TOKEN})
    prover = kw.pop("prover", FakeProver(tokens={API_TOKEN}))  # None: ask the test's Gitea (`GiteaProver`)
    faults_expected = kw.pop("faults_expected", False)
    # The groups' Gitea unless a test names its own (spec_dict's; the admin's choice: GRS_GITEA_URL).
    defaults = {"poll_enabled": False, "resync_interval": 2, "listen_port": 0, "gitea_url": DEFAULT_GITEA}
    options: dict[str, Any] = defaults | kw
    settings = Settings(kubeconfig=str(kubeconfig), redis_url=redis_url, watch_namespace=ns, **options)
    api = await api_client(settings.kubeconfig)
    redis = Redis.from_url(redis_url)
    async with aiohttp.ClientSession() as session:
        controller = Controller(
            settings,
            kube=Kube(api, namespaces=settings.namespaces, protected=settings.protected),
            store=JobStore(redis),
            gitea=GiteaClient(session),
            metrics=Metrics.create(CollectorRegistry()),
            egress=egress,
            registrar=registrar,
            prover=prover,
        )
        task = asyncio.create_task(controller.run())
        try:
            yield controller
        finally:
            ended = task.done()  # before it was cancelled: it crashed (or returned, a bug as well)
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=30)
            assert done, "the controller did not stop within 30 s of being cancelled:\n" + _stacks()
            started = [s.task for s in controller.state.values() if s.task is not None]
            assert all(t.done() for t in started), "a group pass outlived the controller"
            if ended:
                task.result()  # raises what the controller raised
                raise AssertionError("the controller returned during the test")
            faults = group_faults(controller)
            assert faults_expected or not faults, f"a group's objects raised (a bug; see the log): {faults}"
    await api.close()
    await redis.aclose()


async def passes(*controllers: Controller, count: int = 3) -> None:
    """Until each controller made `count` more whole passes: the wait for anything a pass might still do."""
    targets = [(c, c.rounds + count) for c in controllers]
    await eventually(lambda: all(c.rounds >= n for c, n in targets), timeout=30)


async def claim_lasts_longer_than(redis: Redis, job_id: int, seconds: float) -> bool:
    return int(await redis.pttl(f"{{grs}}:claim:{job_id}")) > seconds * 1000


async def queue(redis: Redis, job_id: int, *, labels: list[str], repo: str = "acme/widgets") -> None:
    update = JobUpdate.from_payload(model("queued", job_id=job_id, labels=labels, repo=repo))
    await JobStore(redis).record(update)


# -- the CRD ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "message"), REFUSED)
def test_invalid_runnergroups_are_rejected_by_the_api_server(
    kube: KubeCluster, spec: dict[str, Any], message: str
) -> None:
    body = group("bad")
    body["spec"] = changed(body["spec"], spec)
    status, answer = api_request(kube, "POST", RG.format(ns="default"), body)
    assert status == 422, answer
    assert message in answer["message"]


def test_a_docker_group_with_daemon_flags_is_admitted(kube: KubeCluster) -> None:
    flags = ["--registry-mirror=https://mirror.example.com", "--mtu=1400", "--debug"]
    body = create_group(kube, namespace(kube), "docker", containerMode="dind", dindArgs=flags)
    assert body["spec"]["dindArgs"] == flags


def test_valid_runnergroup_gets_defaults(kube: KubeCluster) -> None:
    ns = namespace(kube)
    body = create_group(kube, ns, "ok")
    assert body["spec"]["minIdleRunners"] == 0
    assert body["spec"]["ttlSecondsAfterFinished"] == 600
    assert body["spec"]["pendingTimeout"] == "10m"
    status, _ = api_request(kube, "POST", RG.format(ns=ns), group("x" * 64))
    assert status == 422


def _pss_namespace(kube: KubeCluster, level: str) -> str:
    ns = f"pss-{level}-{uuid.uuid4().hex[:6]}"
    labels = {"pod-security.kubernetes.io/enforce": level, "pod-security.kubernetes.io/enforce-version": "latest"}
    assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})[0] == 201
    # No controller-manager here to make the default ServiceAccount that Pod admission looks up.
    account = {"metadata": {"name": "default"}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", account)[0] == 201
    return ns


def _admitted(kube: KubeCluster, ns: str, job: dict[str, Any]) -> tuple[int, str]:
    """Whether the API server admits the runner Job and the Pod the Job controller would make from it
    (dry run: the Pod Security admission of the namespace is what decides)."""
    job = json.loads(json.dumps(job).replace('"namespace": "ci"', f'"namespace": "{ns}"'))
    job["metadata"].pop("ownerReferences")
    status, body = api_request(kube, "POST", f"/apis/batch/v1/namespaces/{ns}/jobs?dryRun=All", job)
    assert status == 201, body
    pod = {"metadata": {"name": job["metadata"]["name"]}, "spec": job["spec"]["template"]["spec"]}
    status, body = api_request(kube, "POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", pod)
    return status, str(body.get("message", ""))


@pytest.mark.parametrize(
    ("changes", "privileged"),
    [
        pytest.param({"image": "docker.io/gitea/act_runner:0.2.13"}, False, id="runner-alone"),
        pytest.param({"image": "docker.io/gitea/act_runner:0.2.13", "containerMode": "dind"}, True, id="dind-sidecar"),
        pytest.param({}, True, id="dind-rootless-image"),
    ],
)
def test_runner_pods_are_admitted_under_the_pod_security_level_the_docs_name(
    kube: KubeCluster, changes: dict[str, Any], privileged: bool
) -> None:
    """Docker itself cannot run on the test node (no image of it can be pulled): what is tested is that
    the API server admits the runner Pod we render where the README says, and refuses it elsewhere."""
    job = build_job(GroupRef("ci", "g", "uid"), spec_model(**changes), name="g-1-abcd", job_id=1)
    status, message = _admitted(kube, _pss_namespace(kube, "privileged"), job)
    assert status == 201, message
    status, message = _admitted(kube, _pss_namespace(kube, "baseline"), job)
    if privileged:
        assert status == 403 and 'violates PodSecurity "baseline:latest"' in message and "privileged" in message
    else:
        assert status == 201, message


# -- the controller ---------------------------------------------------------------------------------


async def test_one_runner_per_queued_matching_job_with_the_right_spec(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    ns = namespace(kube)
    rg = create_group(kube, ns, "builders", defaultLabels=[])
    await queue(redis, 11, labels=["k8s"])
    await queue(redis, 12, labels=[])
    await queue(redis, 13, labels=["gpu"])  # no group has gpu
    await queue(redis, 14, labels=["k8s"], repo="someone-else/repo")  # outside the org
    await JobStore(redis).record(JobUpdate.from_payload(model("waiting", job_id=15, labels=["k8s"])))  # on needs:
    # A queue-time objective of 1 s: the jobs that wait for the cap below soon wait past it.
    async with running_controller(kube.kubeconfig, redis_server.url, ns, queue_objective=1) as controller:
        jobs = await eventually(lambda: (j := runner_jobs(kube, ns)) and len(j) >= 2 and j)
        await passes(controller)
        jobs = runner_jobs(kube, ns)
        assert sorted(j["metadata"]["annotations"][JOB_ID_ANNOTATION] for j in jobs) == ["11", "12"]
        for job_id in (11, 12):  # a claim lasts its Register's timeout + 30 s until its create returned, then the TTL
            pending = CLAIM_PENDING_S + REGISTER_TIMEOUT_S
            await eventually(functools.partial(claim_lasts_longer_than, redis, job_id, pending))
        job = jobs[0]
        meta, pod = job["metadata"], job["spec"]["template"]["spec"]
        assert meta["labels"][GROUP_LABEL] == "builders"
        # Which Gitea job it was started for, for cost attribution (`attribution`), on the Job and its Pod
        told = {"gitea.bpg.pw/owner": "acme", "gitea.bpg.pw/repository": "widgets"}
        assert (
            told.items() <= meta["labels"].items()
            and told.items() <= job["spec"]["template"]["metadata"]["labels"].items()
        )
        assert meta["annotations"]["gitea.bpg.pw/repository"] == "acme/widgets"
        assert meta["ownerReferences"][0]["uid"] == rg["metadata"]["uid"]
        assert meta["ownerReferences"][0]["controller"] is True
        assert job["spec"]["ttlSecondsAfterFinished"] == 600
        assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in env
        # Registered by the controller: the Pod holds no registration token, only its own runner's
        # credential, in a Secret named as the runner, owned by its Job, and marked the install's own.
        assert REG_TOKEN not in str(job) and "secretKeyRef" not in str(pod)
        registrar = controller.group_pass.seating.registrations.registrar
        assert isinstance(registrar, FakeRegistrar)
        assert ("http://gitea.invalid:3000", runner_of(job), ("k8s",)) in registrar.registered
        _, credential = api_request(kube, "GET", f"/api/v1/namespaces/{ns}/secrets/{runner_of(job)}")
        assert credential["metadata"]["ownerReferences"] == [
            {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": meta["uid"]}
        ]
        assert credential["metadata"]["labels"]["app.kubernetes.io/created-by"] == "gitea-runner-scaler"
        file = json.loads(base64.b64decode(credential["data"][".runner"]))
        assert (file["name"], file["address"], file["labels"]) == (runner_of(job), "http://gitea.invalid:3000", ["k8s"])
        assert file["ephemeral"] is True and file["token"] and REG_TOKEN not in str(credential)
        assert env["GITEA_RUNNER_NAME"]["value"] == runner_of(job) and runner_of(job).startswith(meta["name"] + ".")
        assert env["GITEA_RUNNER_LABELS"]["value"] == "k8s"
        # Bound to the org it serves: webhooks about other owners' jobs are not believed about it.
        assert await redis.get(f"{{grs}}:runner:{runner_of(job)}") == b"acme"
        assert env["GITEA_RUNNER_EPHEMERAL"]["value"] == "true"

        s = await eventually(lambda: (s := group_status(kube, ns, "builders")).get("activeRunners") == 2 and s)
        assert s["queuedJobs"] == 2 and s["target"] == "acme" and s["observedGeneration"] == 1
        conds = s["conditions"]
        assert conds["Ready"]["status"] == "True"
        assert conds["RunnersHealthy"]["status"] == "True"

        # More demand than slots: never above maxActiveRunners.
        for i in range(20, 30):
            await queue(redis, i, labels=["k8s"])
        await eventually(lambda: len(runner_jobs(kube, ns)) == 3)
        await passes(controller)
        assert len(runner_jobs(kube, ns)) == 3
        await eventually(lambda: events(kube, ns, "RunnerCreated"))  # sent once no create is in flight
        # Why the 12 queued jobs wait: 3 for the runners starting, 9 for the cap; the gpu job and the one
        # outside the org for a group that matches them.
        waits = {"runnerStarting": 3, "maxActiveRunners": 9}
        await eventually(
            lambda: {k: n for k, n in group_status(kube, ns, "builders")["waitingJobs"].items() if n} == waits
        )
        # Past the objective, at its cap: Starved says so and names the cap; the group stays Ready.
        status = await eventually(
            lambda: (s := group_status(kube, ns, "builders"))["conditions"]["Starved"]["status"] == "True" and s
        )
        starved = status["conditions"]["Starved"]
        assert starved["reason"] == "AtMaxActiveRunners" and "maxActiveRunners (3)" in starved["message"], starved
        assert status["conditions"]["Ready"]["status"] == "True"
        gauge = controller.metrics.waiting_jobs
        assert {r: gauge.labels(group=f"{ns}/builders", reason=r)._value.get() for r in waits} == waits
        assert gauge.labels(group="", reason="noMatchingGroup")._value.get() == 2
        assert gauge.labels(group="", reason="waitingInGitea")._value.get() == 1


def _cache_secret(kube: KubeCluster, ns: str) -> str | None:
    status, body = api_request(kube, "GET", f"/api/v1/namespaces/{ns}/secrets/grs-runner-cache")
    return base64.b64decode(body["data"]["secret"]).decode() if status == 200 else None


async def test_the_cache_servers_secret_is_kept_in_the_runner_namespace_before_its_runners_start(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """Runners read the shared secret from a Secret beside them, which the controller makes before the
    first runner and mends when the secret it was given changed (a rotation, a restart)."""
    ns = namespace(kube)
    create_group(kube, ns, "builders", defaultLabels=[])
    cache = RunnerCache("http://cache.grs.svc:8088/", secret="first-secret", secret_name="grs-runner-cache")
    await queue(redis, 31, labels=["k8s"])
    async with running_controller(kube.kubeconfig, redis_server.url, ns, egress=Egress(cache=cache)):
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        assert _cache_secret(kube, ns) == "first-secret"
    (register,) = job["spec"]["template"]["spec"]["initContainers"]
    given = {e["name"]: e.get("valueFrom") for e in register["env"]}
    assert given["GRS_CACHE_SECRET"] == {"secretKeyRef": {"name": "grs-runner-cache", "key": "secret"}}
    assert "first-secret" not in json.dumps(job)
    # Someone replaced it with a Secret of their own (no label): it is mended, and marked as ours again,
    # so that no RunnerGroup may use it as a token.
    path = f"/api/v1/namespaces/{ns}/secrets/grs-runner-cache"
    assert api_request(kube, "DELETE", path)[0] == 200
    mine = {"metadata": {"name": "grs-runner-cache"}, "stringData": {"secret": "someone-elses"}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", mine)[0] == 201
    rotated = RunnerCache(cache.url, secret="second-secret", secret_name=cache.secret_name)
    await queue(redis, 32, labels=["k8s"])
    async with running_controller(kube.kubeconfig, redis_server.url, ns, egress=Egress(cache=rotated)):
        await eventually(lambda: len(runner_jobs(kube, ns)) == 2)
        assert _cache_secret(kube, ns) == "second-secret"
    labels = api_request(kube, "GET", path)[1]["metadata"]["labels"]
    assert labels == {"app.kubernetes.io/created-by": "gitea-runner-scaler"}


async def test_a_runnergroup_written_for_gitea_runner_operator_applies_unchanged_and_runs(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    ns = namespace(kube)
    body = group("legacy")
    body["spec"] = operator_form()
    status, stored = api_request(kube, "POST", RG.format(ns=ns), body)
    assert status == 201, stored
    assert stored["spec"]["giteaURL"] == "http://gitea.invalid:3000", "kept as written, not pruned"
    await queue(redis, 31, labels=["k8s"], repo="acme/widgets")
    await queue(redis, 32, labels=["k8s"], repo="acme/elsewhere")  # not the group's repository
    async with running_controller(kube.kubeconfig, redis_server.url, ns):
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        s = await eventually(lambda: (s := group_status(kube, ns, "legacy")).get("target") and s)
    assert job["metadata"]["annotations"][JOB_ID_ANNOTATION] == "31"
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["initContainers"][-1]["env"]}
    assert env["GITEA_INSTANCE_URL"]["value"] == "http://gitea.invalid:3000"
    assert "secretKeyRef" not in str(job), "registered by the controller, with the token `registrationToken` names"
    assert s["target"] == "acme/widgets"
    assert s["conditions"]["Ready"]["status"] == "True"


async def test_two_reconcilers_never_start_two_runners_for_one_job(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    ns = namespace(kube)
    create_group(kube, ns, "wide", maxActiveRunners=100, labels=[], defaultLabels=[])
    create_group(kube, ns, "narrow", maxActiveRunners=4, scope="repo", repo="acme/narrow", labels=[], defaultLabels=[])
    for i in range(1, 31):
        await queue(redis, i, labels=[])
    for i in range(100, 110):
        await queue(redis, i, labels=[], repo="acme/narrow")
    registrar = FakeRegistrar(tokens={REG_TOKEN})  # both replicas register through it: Gitea's one view
    async with (
        running_controller(kube.kubeconfig, redis_server.url, ns, registrar=registrar) as one,
        running_controller(kube.kubeconfig, redis_server.url, ns, registrar=registrar) as two,
    ):
        await eventually(lambda: len(runner_jobs(kube, ns)) >= 34, timeout=30)
        await passes(one, two)
        jobs = runner_jobs(kube, ns)
    ids = [j["metadata"]["annotations"][JOB_ID_ANNOTATION] for j in jobs]
    assert len(ids) == len(set(ids)) == 34
    # Names are deterministic, so a double claim would show as a 409 on the create, not as a second Job:
    # the runners Gitea registered tell. One each, and each one a runner Job's.
    registered = sorted(name for _, name, _ in registrar.registered)
    assert registered == sorted(runner_of(j) for j in jobs), "a job got a second runner registered in Gitea"
    narrow = [j for j in jobs if j["metadata"]["labels"][GROUP_LABEL] == "narrow"]
    assert len(narrow) == 4  # maxActiveRunners held across both replicas
    assert {int(j["metadata"]["annotations"][JOB_ID_ANNOTATION]) for j in narrow} <= set(range(100, 110))


async def test_a_job_taken_since_the_queue_was_read_starts_no_second_runner(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """A pass reads the queue for every group first, then each group's runners. A runner that took its
    job in between is busy, and its job must not still count as waiting: that used to start a warm
    runner nobody needed, idle for a minute after the run had finished."""
    ns = namespace(kube)
    create_group(kube, ns, "racy", labels=[], defaultLabels=[])
    await queue(redis, 20, labels=[])
    store = JobStore(redis)
    async with running_controller(kube.kubeconfig, redis_server.url, ns) as controller:
        (runner,) = await eventually(lambda: [j["metadata"]["name"] for j in runner_jobs(kube, ns)])
        read_before = await store.queued()  # what reconcile_all read, a moment before...
        taken = JobUpdate.from_payload(model("in_progress", job_id=20, labels=[]))
        await store.record(dataclasses.replace(taken, runner_name=runner))
        await eventually(lambda: any(j.name == runner for j in controller.jobs.items.values()))
        group_obj = next(g for g in controller.groups.items.values() if g.name == "racy")
        spec = controller.views()[0][1]
        assert spec is not None
        controller.index()
        decided = await controller.reconcile_group(group_obj, spec, read_before, GroupState())
    assert [j.job_id for j in read_before] == [20]
    assert decided.create == () and decided.counts.queued == 0
    assert [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [runner]


async def test_spec_the_schema_allows_but_the_controller_refuses_is_reported(
    kube: KubeCluster, redis_server: RedisServer
) -> None:
    ns = namespace(kube)
    create_group(kube, ns, "odd", pendingTimeout="")  # matches the pattern, but is no duration
    async with running_controller(kube.kubeconfig, redis_server.url, ns):
        cond = await eventually(lambda: group_status(kube, ns, "odd")["conditions"].get("Ready"))
        # The Event follows the status write: wait for it while the controller still runs.
        warned = await eventually(lambda: events(kube, ns, "InvalidSpec"))
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec")
    assert "duration" in cond["message"]
    assert "duration" in warned[0]["message"]


async def test_the_shipped_pod_schema_is_the_api_servers_own(kube: KubeCluster) -> None:
    api = await api_client(str(kube.kubeconfig))
    try:
        served = await pod_schema(Kube(api))
    finally:
        await api.close()
    assert served == shipped_pod_schema(), (
        "the API server serves another PodTemplateSpec schema: run python -m reconciler.kube.openapi KUBECONFIG"
        " > reconciler/kube/pod_template_schema.json"
    )


# Shapes of other tools' habits that the CRD admits (podTemplate is open), and what the group then says.
MALFORMED = {
    "compose-env": (
        {"spec": {"containers": [{"name": "runner", "env": ["FOO=bar"]}]}},
        "spec.podTemplate.spec.containers[0].env[0]: expected an object, got a string 'FOO=bar'",
    ),
    "pull-names": (
        {"spec": {"imagePullSecrets": ["regcred"]}},
        "spec.podTemplate.spec.imagePullSecrets[0]: expected an object, got a string 'regcred'",
    ),
    "null-env-from": (
        {"spec": {"containers": [{"name": "runner", "envFrom": [None]}]}},
        "spec.podTemplate.spec.containers[0].envFrom[0]: expected a value, got null",
    ),
    "typo": (
        {"spec": {"containers": [{"name": "runner", "evn": [{"name": "A", "value": "1"}]}]}},
        "spec.podTemplate.spec.containers[0]: unknown field 'evn' (did you mean 'env'?)",
    ),
}


async def test_malformed_groups_cost_only_themselves_and_say_which_field_within_one_pass(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """Issue 34: one group with a typo used to stop every group of the install (the policy raised on the
    shape, inside the round). Now each says what is wrong, and a group of another team is served."""
    good, bad = namespace(kube), namespace(kube)
    create_group(kube, good, "builders")
    for name, (template, _) in MALFORMED.items():
        create_group(kube, bad, name, podTemplate=template)
    await queue(redis, 41, labels=["k8s"])
    async with running_controller(kube.kubeconfig, redis_server.url, f"{good},{bad}") as controller:
        (job,) = await eventually(lambda: runner_jobs(kube, good))
        for name, (_, message) in MALFORMED.items():
            ready = await eventually(functools.partial(condition, kube, bad, name, "Ready"))
            assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec"), ready
            assert message in ready["message"], ready["message"]
        assert controller.group_views.schema_from_server  # the API server's own schema judged them
    assert job["metadata"]["annotations"][JOB_ID_ANNOTATION] == "41"
    assert runner_jobs(kube, bad) == []


async def test_a_group_asking_its_runners_for_the_hosts_pid_namespace_is_refused_unless_the_policy_allows(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """A RunnerGroup author who may not create Pods gets no host-level runner Pod through the controller."""
    ns = namespace(kube)
    template = {"spec": {"hostPID": True, "serviceAccountName": "default", "containers": [{"name": "runner"}]}}
    create_group(kube, ns, "hosty", defaultLabels=[], image="docker.io/gitea/act_runner:0.2.13", podTemplate=template)
    await queue(redis, 41, labels=["k8s"])
    async with running_controller(kube.kubeconfig, redis_server.url, ns) as controller:
        cond = await eventually(lambda: group_status(kube, ns, "hosty").get("conditions", {}).get("Ready"))
        await passes(controller)
        assert not runner_jobs(kube, ns), "no runner of a refused group"
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec"), cond
    assert "not allowed by the install's runner Pod policy: spec.podTemplate.spec.hostPID" in cond["message"]
    assert "spec.podTemplate.spec.serviceAccountName (GRS_RUNNER_POD_ALLOW_SERVICE_ACCOUNT)" in cond["message"]
    allowed: dict[str, Any] = {"runner_pod_allow_host_namespaces": True, "runner_pod_allow_service_account": True}
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **allowed):
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
    assert job["spec"]["template"]["spec"]["hostPID"] is True


async def test_a_group_of_another_gitea_is_refused_however_old_and_the_admins_default_instance_is_served(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """Job ids are per instance and Redis keys them by id: the default instance is the admin's
    (GRS_GITEA_URL), so the oldest group, naming another Gitea, is refused with what to do instead and
    starts nothing; the younger group of the default instance is served."""
    ns = namespace(kube)
    create_group(kube, ns, "a-first", defaultLabels=[], gitea={"url": "https://other-gitea.example:3000"})
    create_group(kube, ns, "b-second", defaultLabels=[])  # created later; its name also loses a tie
    await queue(redis, 51, labels=["k8s"])
    async with running_controller(kube.kubeconfig, redis_server.url, ns) as controller:
        cond = await eventually(lambda: group_status(kube, ns, "a-first").get("conditions", {}).get("Ready"))
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        await passes(controller)
    assert (cond["status"], cond["reason"]) == ("False", "InvalidSpec"), cond
    assert "https://other-gitea.example:3000 is not a Gitea instance this install serves" in cond["message"], cond
    assert f"its default instance is {DEFAULT_GITEA} (GRS_GITEA_URL" in cond["message"], cond
    assert "GRS_GITEA_INSTANCES" in cond["message"]
    assert job["metadata"]["labels"][GROUP_LABEL] == "b-second"
    assert [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [job["metadata"]["name"]]


async def test_two_gitea_instances_jobs_with_one_id_each_get_their_runner_and_no_poll_drops_the_others(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """The admin names the second Gitea (GRS_GITEA_INSTANCES); both number a job 700. Each instance's
    group starts one runner for its own job 700; complete listings of each instance (polls) leave the
    other's job queued, and a job only the second one lists (701, its webhook lost) is the second's."""
    fakes = [FakeGitea(token=API_TOKEN), FakeGitea(token=API_TOKEN)]
    urls = [str((await aiohttp_server(f.app())).make_url("")).rstrip("/") for f in fakes]
    ns = namespace(kube)
    for name, url, fake in zip(("on-first", "on-second"), urls, fakes, strict=True):
        create_group(kube, ns, name, gitea={"url": url}, labels=[], defaultLabels=[])
        fake.add_job(700, repo="acme/widgets", labels=[])
    fakes[1].add_job(701, repo="acme/widgets", labels=[])
    update = JobUpdate.from_payload(model("queued", job_id=700, labels=[]))
    for store in (JobStore(redis), JobStore(redis).of("second")):
        await store.record(update)
    options: dict[str, Any] = {"poll_enabled": True, "poll_interval": 3600, "gitea_instances": f"second={urls[1]}"}
    options["gitea_url"] = urls[0]
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **options) as controller:
        jobs = await eventually(lambda: (lambda js: js if len(js) == 3 else None)(runner_jobs(kube, ns)))
        for _ in range(2):  # a job is gone after two complete listings miss it
            await asyncio.wait_for(controller.poll_once(), timeout=60)
        await passes(controller)
        assert len(runner_jobs(kube, ns)) == 3
    ran = sorted((j["metadata"]["labels"][GROUP_LABEL], j["metadata"]["annotations"][JOB_ID_ANNOTATION]) for j in jobs)
    assert ran == [("on-first", "700"), ("on-second", "700"), ("on-second", "701")]
    assert [j.job_id for j in await JobStore(redis).queued()] == [700]
    assert sorted(j.job_id for j in await JobStore(redis).of("second").queued()) == [700, 701]


async def test_a_registration_token_gitea_refuses_starts_no_runner_and_says_so_until_it_is_replaced(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """The controller registers each runner before its Job exists: a token Gitea refuses (or a Secret
    without it) makes no runner Job, frees the seat at once, and the group's RunnersAdmitted says why;
    once Gitea takes the token, the runner starts."""
    ns = namespace(kube)
    create_group(kube, ns, "refused", defaultLabels=[], maxActiveRunners=1)
    # A registration token Secret not there yet (GitOps applies it later) stops nothing either.
    create_group(kube, ns, "later", defaultLabels=[], labels=["other"],
                 registrationToken={"secretRef": {"name": "not-yet", "key": "reg"}})  # fmt: skip
    await queue(redis, 61, labels=["k8s"])
    await queue(redis, 62, labels=["other"])
    registrar = FakeRegistrar(tokens=())  # Gitea knows no token yet
    async with running_controller(kube.kubeconfig, redis_server.url, ns, registrar=registrar) as controller:
        refused = await eventually(lambda: _runners_admitted(kube, ns, "refused", "RegistrationRefused"))
        later = await eventually(lambda: _runners_admitted(kube, ns, "later", "RegistrationRefused"))
        assert not runner_jobs(kube, ns)
        group_obj = next(g for g in controller.groups.items.values() if g.name == "refused")
        assert not await redis.zrange(f"{{grs}}:seats:{group_obj.uid}", 0, -1), "no seat held"
        registrar.tokens.add(REG_TOKEN)  # the token rotated in Gitea to the one the Secret holds
        secret = {"metadata": {"name": "not-yet"}, "stringData": {"reg": REG_TOKEN}}
        assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", secret)[0] == 201
        jobs = await eventually(lambda: len(j := runner_jobs(kube, ns)) == 2 and j, timeout=60)
    assert "runner registration token not found" in refused["message"]
    assert f"Gitea refused the registrationToken (Secret {ns}/gitea, key reg)" in refused["message"]
    assert REG_TOKEN not in refused["message"]
    assert f"registrationToken: Secret {ns}/not-yet not found" in later["message"]
    assert sorted(j["metadata"]["labels"][GROUP_LABEL] for j in jobs) == ["later", "refused"]


def _runners_admitted(kube: KubeCluster, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    cond = group_status(kube, ns, name).get("conditions", {}).get("RunnersAdmitted")
    return cond if cond and cond["reason"] == reason else None


async def test_runner_jobs_hold_seats_under_the_epoch_the_status_records(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """Every runner Job holds a seat in its group's set, and the group's status records the seat epoch
    (it tells a replica after a Redis loss that creates of an older epoch may still land)."""
    ns = namespace(kube)
    create_group(kube, ns, "seated", maxActiveRunners=2, labels=[], defaultLabels=[])
    for job_id in (31, 32, 33):
        await queue(redis, job_id, labels=[])
    async with running_controller(kube.kubeconfig, redis_server.url, ns) as controller:
        jobs = await eventually(
            lambda: len(names := [j["metadata"]["name"] for j in runner_jobs(kube, ns)]) == 2 and names
        )
        epoch = cast("bytes", await redis.get("{grs}:epoch")).decode().split(":")[0]
        recorded = await eventually(lambda: group_status(kube, ns, "seated").get("seatEpoch"))
        group_obj = next(g for g in controller.groups.items.values() if g.name == "seated")
        seats = cast("list[bytes]", await redis.zrange(f"{{grs}}:seats:{group_obj.uid}", 0, -1))
    assert recorded == epoch
    assert sorted(jobs) == sorted(s.decode() for s in seats) and len(jobs) == 2
    assert all(name.startswith("seated-3") and name.endswith("-1") for name in jobs)  # {job id}-{attempt}


async def test_a_runner_that_ran_its_job_unseen_is_replaced_only_once_a_later_poll_lists_the_job(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """Both webhooks of the job were lost, so Redis still has it queued when its runner's Job succeeds.
    An ephemeral runner exits 0 after running a job, most likely this one: no second runner, until a
    poll begun after the runner finished still lists the job queued."""
    ns = namespace(kube)
    create_group(kube, ns, "unseen", labels=[], defaultLabels=[])
    await queue(redis, 55, labels=[])
    store = JobStore(redis)
    async with running_controller(kube.kubeconfig, redis_server.url, ns) as controller:
        (first,) = await eventually(lambda: [j["metadata"]["name"] for j in runner_jobs(kube, ns)])
        complete_job(kube, ns, first)
        await eventually(lambda: any(j.name == first and j.finished for j in controller.jobs.items.values()))
        await passes(controller)  # passes that saw it finished
        assert [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [first]
        finished_ms = next(j.finished_ms for j in controller.jobs.items.values() if j.name == first)
        since = await eventually(lambda: _after(store.now_ms(), finished_ms + 1000))
        await store.sync_polled(
            Scope("owner", "acme"),
            [JobUpdate.from_payload(model("queued", job_id=55, labels=[]))],
            polled_since_ms=since,
            complete=True,
        )
        names = await eventually(
            lambda: [j["metadata"]["name"] for j in runner_jobs(kube, ns) if j["metadata"]["name"] != first]
        )
    assert names == [f"{first}-r1"]


async def _after(now: Awaitable[int], moment: int) -> int | None:
    value = await now
    return value if value > moment else None


async def test_stuck_pending_runner_is_reaped_and_retried(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    fake = FakeGitea(token=API_TOKEN)
    server = await aiohttp_server(fake.app())
    ns = namespace(kube)
    url = str(server.make_url("")).rstrip("/")
    create_group(kube, ns, "slow", pendingTimeout="2s", labels=[], defaultLabels=[], gitea={"url": url})
    await queue(redis, 77, labels=[])
    fake.fail_with = 503  # while Gitea cannot say the runner took no job, it stays, and gets no second
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url) as controller:
        first = (await eventually(lambda: runner_jobs(kube, ns)))[0]["metadata"]["name"]
        # No kubelet here: the Job never gets a running Pod, so it is Pending past the timeout.
        kept = controller.metrics.runners_kept.labels(group=f"{ns}/slow", reason="unconfirmed")
        await eventually(lambda: kept._value.get() >= 2)
        assert [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [first]
        fake.fail_with = None  # Gitea lists no row of it: it never registered
        second = await eventually(
            lambda: [j["metadata"]["name"] for j in runner_jobs(kube, ns) if j["metadata"]["name"] != first], timeout=30
        )
    assert second[0].startswith("slow-77-")
    assert any(first in e["message"] for e in events(kube, ns, "RunnerReaped"))


async def test_watch_relists_after_410_gone(kube: KubeCluster) -> None:
    ns = namespace(kube)
    api = await api_client(str(kube.kubeconfig))
    k = Kube(api, namespaces=(ns,))
    calls = 0

    async def expired_first(**kw: Any) -> Any:
        nonlocal calls
        result = await k.batch.list_namespaced_job(ns, **kw)
        if not kw.get("watch"):
            calls += 1
            if calls == 1:  # pretend the list is so old that etcd compacted it away
                result.metadata.resource_version = "1"
        return result

    body: dict[str, Any] = {"metadata": {"name": "before"}, "data": {}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/configmaps", body)[0] == 201  # some history
    # ...compacted away: the API server refuses a list at revision 1 from etcd (410 Gone)
    old_list = f"/apis/batch/v1/namespaces/{ns}/jobs?resourceVersion=1&resourceVersionMatch=Exact"
    await eventually(lambda: api_request(kube, "GET", old_list)[0] == 410, timeout=30)
    changed = asyncio.Event()
    informer = Informer(
        "jobs",
        list_fn=expired_first,
        convert=job_from,
        sanitize=api.sanitize_for_serialization,
        on_change=changed.set,
        backoff=(0.05, 0.1),
    )
    task = asyncio.create_task(informer.run())
    try:
        await eventually(lambda: informer.relists >= 2, timeout=20)
        body = {
            "metadata": {"name": "seen", "labels": {}},
            "spec": {
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}
            },
        }
        assert api_request(kube, "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", body)[0] == 201
        await eventually(lambda: (ns, "seen") in informer.items)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await api.close()


MakeServer = Callable[[web.Application], Awaitable[TestServer]]


async def test_a_group_naming_the_installs_own_secrets_is_refused_and_its_gitea_hears_nothing(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """A confused deputy refused: a RunnerGroup author points `authToken` at the chart's Redis password
    (a Secret our hook made) and `gitea.url` at a server of theirs; another points `registrationToken`
    at the webhook secret the admin named. Neither Secret leaves: no poll, no runner."""
    ns = namespace(kube)
    made = {"name": "grs-redis", "labels": {"app.kubernetes.io/created-by": "gitea-runner-scaler"}}
    for meta, data in ((made, {"redis-password": "redis-s3cret"}), ({"name": "hook"}, {"secret": "hook-s3cret"})):
        assert (
            api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": meta, "stringData": data})[0]
            == 201
        )
    heard: list[str] = []

    @web.middleware
    async def capture(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> Any:
        heard.append(f"{request.method} {request.path_qs} {dict(request.headers)}")
        return await handler(request)

    # Gitea lists job 61 as queued, so the poll keeps it in Redis (a Gitea that listed nothing would let the
    # poll drop it before a pass tried it, and the refusal would never come)
    fake = FakeGitea(token=API_TOKEN)
    fake.add_job(61, repo="acme/widgets", labels=["b"])
    app = fake.app()
    app.middlewares.append(capture)
    url = str((await aiohttp_server(app)).make_url("")).rstrip("/")
    stolen = {"secretRef": {"name": "grs-redis", "key": "redis-password"}}
    create_group(kube, ns, "poller", gitea={"url": url}, authToken=stolen, labels=["a"], defaultLabels=[])
    hook = {"secretRef": {"name": "hook", "key": "secret"}}
    create_group(kube, ns, "runner", gitea={"url": url}, registrationToken=hook, labels=["b"], defaultLabels=[])
    await queue(redis, 61, labels=["b"])
    options: dict[str, Any] = {"poll_enabled": True, "poll_interval": 1, "protected_secrets": f"{ns}/hook"}
    options["gitea_url"] = url  # refused for its Secrets, not for its Gitea
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **options) as controller:
        polled = await eventually(
            lambda: (
                (c := group_status(kube, ns, "poller").get("conditions", {}).get("GiteaReachable"))
                and c["reason"] != "NotPolledYet"
                and c
            )
        )

        def refused() -> dict[str, Any] | None:
            ready = condition(kube, ns, "runner", "Ready")
            return ready if ready is not None and ready["status"] == "False" else None

        ready = await eventually(refused, timeout=60)  # its scope's proof, its pass, the refusal, the status
        await asyncio.wait_for(controller.poll_once(), timeout=60)
        await passes(controller)
        assert not runner_jobs(kube, ns), "none would take the webhook secret"
    assert (polled["status"], polled["reason"]) == ("False", "AuthTokenUnavailable"), polled
    assert f"Secret {ns}/grs-redis is the install's own: a RunnerGroup may not use it" in polled["message"]
    assert f"Secret {ns}/hook is the install's own" in ready["message"], ready
    # The other group polls with its own, legitimate API token; neither of the install's Secrets went out.
    assert not [h for h in heard if "s3cret" in h or API_TOKEN not in h], heard


async def test_polling_fallback_starts_runners_no_webhook_reported(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    fake = FakeGitea(token=API_TOKEN)
    server = await aiohttp_server(fake.app())
    url = str(server.make_url("")).rstrip("/")
    ns = namespace(kube)
    create_group(kube, ns, "polled", gitea={"url": url}, labels=[], defaultLabels=[])
    create_group(kube, ns, "polled-too", gitea={"url": url}, labels=["other"], defaultLabels=[])
    fake.add_job(501, repo="acme/widgets", labels=[])
    fake.add_job(502, repo="acme/widgets", labels=[], status="waiting")  # blocked: never demand
    async with running_controller(
        kube.kubeconfig, redis_server.url, ns, poll_enabled=True, poll_interval=1, gitea_url=url
    ) as controller:
        jobs = await eventually(lambda: runner_jobs(kube, ns))
        assert [j["metadata"]["annotations"][JOB_ID_ANNOTATION] for j in jobs] == ["501"]

        def reached(want: str) -> Any:
            cond = group_status(kube, ns, "polled")["conditions"].get("GiteaReachable", {})
            return cond.get("status") == want and cond

        await eventually(lambda: reached("True"))
        assert group_status(kube, ns, "polled")["lastCheckTime"]
        # Two groups with one (url, scope, token): one request per poll cycle, not one per group.
        before = fake.requests["org_jobs"]
        await asyncio.wait_for(controller.poll_once(), timeout=60)
        assert fake.requests["org_jobs"] - before == 1
        # Gitea goes down: the condition says so; runners already started stay.
        fake.fail_with = 503

        cond = await eventually(lambda: reached("False"))
        assert "503" in cond["message"] and API_TOKEN not in str(cond)
    # The blocked (`waiting`) job was never recorded as demand.
    assert [j.job_id for j in await JobStore(redis).queued()] == [501]


async def test_ready_says_why_a_job_of_the_group_cannot_get_a_runner_token_refused_gitea_too_old(
    kube: KubeCluster, redis_server: RedisServer, aiohttp_server: MakeServer
) -> None:
    """Issue 34: `Ready` said True while Gitea refused the token or was too old for the poll."""
    fake = FakeGitea(token=API_TOKEN)
    server = await aiohttp_server(fake.app())
    url = _url(server)
    ns = namespace(kube)
    wrong = {"metadata": {"name": "revoked"}, "stringData": {"api": "a-revoked-token"}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", wrong)[0] == 201
    create_group(kube, ns, "revoked", gitea={"url": url}, authToken={"secretRef": {"name": "revoked", "key": "api"}})
    create_group(kube, ns, "fine", gitea={"url": url})
    settings: dict[str, Any] = {"poll_enabled": True, "poll_interval": 1, "gitea_url": url}
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **settings):

        def ready(name: str, reason: str) -> Any:
            cond = condition(kube, ns, name, "Ready") or {}
            return cond.get("reason") == reason and cond

        refused = await eventually(lambda: ready("revoked", "TokenRefused"))
        assert refused["status"] == "False" and "refused the group's API token for org acme" in refused["message"]
        assert "a-revoked-token" not in str(group_status(kube, ns, "revoked"))
        assert (await eventually(lambda: ready("fine", "Reconciled")))["status"] == "True"
        fake.version = "1.24.6"  # the jobs API answers 404 from now on
        old = await eventually(lambda: ready("fine", "GiteaTooOld"))
        assert old["status"] == "False" and "needs Gitea 1.25 or newer; this one is 1.24.6" in old["message"]


async def test_a_queued_webhook_doubted_as_a_replay_gets_a_runner_only_once_the_poll_lists_the_job(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """The receiver recorded two `queued` about jobs created before its replay window (`aged`): a replay
    about job 601, long over in Gitea, and a re-run, 602, that Gitea lists queued. Only 602 gets a runner,
    once the poll lists it; 601 is marked gone by the poll without ever getting one."""
    fake = FakeGitea(token=API_TOKEN)
    server = await aiohttp_server(fake.app())
    ns = namespace(kube)
    create_group(kube, ns, "doubting", gitea={"url": str(server.make_url("")).rstrip("/")}, labels=[], defaultLabels=[])
    fake.add_job(602, repo="acme/widgets", labels=[])
    for job_id in (601, 602):
        update = JobUpdate.from_payload(model("queued", job_id=job_id, labels=[]))
        await JobStore(redis).record(dataclasses.replace(update, aged=True))
    async with running_controller(
        kube.kubeconfig, redis_server.url, ns, poll_enabled=True, poll_interval=1, gitea_url=_url(server)
    ) as controller:
        await eventually(lambda: runner_jobs(kube, ns))
        await eventually(lambda: _state_is(redis, 601, b"gone"))
        await passes(controller)
    assert [j["metadata"]["annotations"][JOB_ID_ANNOTATION] for j in runner_jobs(kube, ns)] == ["602"]


async def test_with_the_poll_off_a_doubted_job_gets_its_runner_as_any(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """Nothing could ever confirm it: waiting would only lose a re-run."""
    ns = namespace(kube)
    create_group(kube, ns, "trusting", labels=[], defaultLabels=[])
    update = JobUpdate.from_payload(model("queued", job_id=603, labels=[]))
    await JobStore(redis).record(dataclasses.replace(update, aged=True))
    async with running_controller(kube.kubeconfig, redis_server.url, ns, poll_enabled=False):
        jobs = await eventually(lambda: runner_jobs(kube, ns))
    assert [j["metadata"]["annotations"][JOB_ID_ANNOTATION] for j in jobs] == ["603"]


async def test_with_the_poll_failing_a_doubted_job_gets_its_runner(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """A Gitea that cannot be listed (its API down, or too old to list jobs) never confirms a job."""
    fake = FakeGitea(token=API_TOKEN)
    fake.fail_with = 503
    server = await aiohttp_server(fake.app())
    ns = namespace(kube)
    create_group(kube, ns, "unpolled", gitea={"url": str(server.make_url("")).rstrip("/")}, labels=[], defaultLabels=[])
    update = JobUpdate.from_payload(model("queued", job_id=604, labels=[]))
    await JobStore(redis).record(dataclasses.replace(update, aged=True))
    options: dict[str, Any] = {"poll_enabled": True, "poll_interval": 1, "gitea_url": _url(server)}
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **options):
        jobs = await eventually(lambda: runner_jobs(kube, ns))
        # The status follows the create (a write of counts waits behind creates in flight): wait for it.
        reached = await eventually(functools.partial(condition, kube, ns, "unpolled", "GiteaReachable"))
    assert [j["metadata"]["annotations"][JOB_ID_ANNOTATION] for j in jobs] == ["604"]
    assert reached["reason"] == "PollFailed"


async def _state_is(redis: Redis, job_id: int, state: bytes) -> bool:
    return bool(await redis.hget(f"{{grs}}:job:{job_id}", "state") == state)


def test_every_example_applies_to_the_api_server(kube: KubeCluster) -> None:
    import yaml

    ns = namespace(kube)
    root = Path(__file__).resolve().parents[2] / "deploy" / "examples"
    for path in sorted(root.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc["kind"] == "RunnerGroup":
                status, body = api_request(kube, "POST", RG.format(ns=ns), doc)
            else:
                status, body = api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", doc)
            assert status == 201, (path.name, body)


async def test_the_ghost_sweep_spares_the_row_of_a_runner_whose_job_the_cache_holds(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """A runner offline in Gitea whose Job is alive keeps its row, even without a seat (Redis lost it):
    the sweep reads the Jobs cache as it is now, not as it was when the controller started."""
    fake = FakeGitea(token=API_TOKEN)
    server = await aiohttp_server(fake.app())
    ns = namespace(kube)
    create_group(kube, ns, "swept", gitea={"url": str(server.make_url("")).rstrip("/")}, labels=[], defaultLabels=[])
    await queue(redis, 61, labels=[])
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=_url(server)) as controller:
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        name = job["metadata"]["name"]
        await eventually(lambda: any(j.name == name for j in controller.jobs.items.values()))
        fake.add_runner(runner_of(job), status="offline")
        # An earlier runner of the same Job name (its Job and Pods gone, the name given again) left its row
        earlier = fake.add_runner(f"{name}.0badc0de", status="offline")
        group_obj = next(g for g in controller.groups.items.values() if g.name == "swept")
        await redis.delete(f"{{grs}}:seats:{group_obj.uid}")  # no seat protects it now
        assert [await controller.sweep_once() for _ in range(2)] == [0, 1], "a ghost goes at its second sweep"
    assert fake.deleted == [earlier], "the row of the runner whose Job is alive stays; the earlier one's goes"


def _settled(controller: Controller, ns: str, name: str) -> bool:
    """Whether the group's last pass is over and complete, began from the group as the cache has it
    now (its status written), and nothing has made the next one due."""
    state = controller.state.get((ns, name))
    group_now = next((g for g in controller.groups.items.values() if (g.namespace, g.name) == (ns, name)), None)
    if state is None or state.task is None or not state.task.done() or state.done_as is None or state.due:
        return False
    return group_now is not None and state.done_as[0] is group_now and group_now.status.get("activeRunners") == 1


async def test_a_group_passes_again_only_when_what_it_decides_from_changed(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """Every change in Redis wakes the controller. A group whose objects and queued jobs did not change,
    and whose runners took or finished no job, would decide the same: its pass is skipped (passes of
    unchanged groups were most of a burst's cost over a thousand groups). A runner that took a job the
    group does not hold changes nothing in the group's objects, yet the group must look again."""
    ns = namespace(kube)
    create_group(kube, ns, "steady", labels=[], defaultLabels=[])
    await queue(redis, 40, labels=[])
    async with running_controller(kube.kubeconfig, redis_server.url, ns, resync_interval=600) as controller:
        (runner,) = await eventually(lambda: [runner_of(j) for j in runner_jobs(kube, ns)])
        await eventually(lambda: _settled(controller, ns, "steady"))
        ran: list[str] = []
        original = controller.group_pass.run

        async def counted(group: Any, *args: Any, **kw: Any) -> Any:
            ran.append(group.name)
            return await original(group, *args, **kw)

        controller.group_pass.run = counted  # type: ignore[method-assign]
        for job_id in range(41, 46):  # jobs of a repository no group serves: each wakes the controller
            rounds = controller.rounds
            await queue(redis, job_id, labels=[], repo="other/unserved")
            await eventually(lambda: controller.rounds > rounds)  # noqa: B023
        assert ran == []
        taken = JobUpdate.from_payload(model("in_progress", job_id=45, labels=[], repo="other/unserved"))
        await JobStore(redis).record(dataclasses.replace(taken, runner_name=runner))
        await eventually(lambda: "steady" in ran)


async def test_a_create_the_api_server_turns_down_for_quota_frees_its_seat_at_once(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """A ResourceQuota refusal writes nothing: the runner's seat is free again at once, not after the
    90 s kept for creates that may still land, so a group at `maxActiveRunners: 1` does not stall."""
    ns = namespace(kube)
    quota = {"metadata": {"name": "no-jobs"}, "spec": {"hard": {"count/jobs.batch": "0"}}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/resourcequotas", quota)[0] == 201
    # No controller-manager here computes the quota's usage: write it as it would.
    counted = {**quota, "status": {"hard": {"count/jobs.batch": "0"}, "used": {"count/jobs.batch": "0"}}}
    path = f"/api/v1/namespaces/{ns}/resourcequotas/no-jobs/status"
    assert api_request(kube, "PUT", path, counted)[0] == 200
    create_group(kube, ns, "quota", labels=[], defaultLabels=[], maxActiveRunners=1)
    await queue(redis, 71, labels=[])
    async with running_controller(kube.kubeconfig, redis_server.url, ns) as controller:
        refused = controller.metrics.creates_refused.labels(group=f"{ns}/quota", reason="quota")
        await eventually(lambda: refused._value.get() >= 1)
        group_obj = next(g for g in controller.groups.items.values() if g.name == "quota")
        seats = f"{{grs}}:seats:{group_obj.uid}"
        # (each retry takes the seat for a moment; a seat kept for the 90 s would never read empty here)
        await eventually(lambda: _none(redis.zcard(seats)), timeout=15)

        # and the group says why no runner starts
        def admitted() -> dict[str, Any]:
            return dict(group_status(kube, ns, "quota")["conditions"].get("RunnersAdmitted") or {})

        condition = await eventually(lambda: admitted().get("status") == "False" and admitted())
        assert condition["reason"] == "JobRefused", condition
        assert "ResourceQuota exceeded" in condition["message"] and "no-jobs" in condition["message"], condition
    assert runner_jobs(kube, ns) == []


@pytest.mark.parametrize("taker", ["killed-and-restarted", "paused", "alive"])
async def test_the_seat_of_a_replica_killed_before_its_create_is_free_within_seconds(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, taker: str
) -> None:
    """A replica killed between taking a seat and sending its create strands the seat: freed once the
    taker's heartbeat lapsed, its Pod runs a later process, and the API server says the Job does not
    exist, within seconds, not the 90 s kept for creates that may still land. A seat whose taker lives
    on is kept, and so is one whose taker is only silent (paused: its create may land when it resumes)."""
    ns = namespace(kube)
    body = create_group(
        kube, ns, "one", scope="repo", repo=f"acme/{ns}", labels=[], defaultLabels=[], maxActiveRunners=1
    )
    uid = body["metadata"]["uid"]
    seats, coordination = f"{{grs}}:seats:{uid}", Coordination(redis)
    async with running_controller(kube.kubeconfig, redis_server.url, ns) as controller:
        await eventually(lambda: group_status(kube, ns, "one").get("seatEpoch"))
        epoch = await coordination.epoch(new_id="unused")
        # The killed replica took the seat 20 s ago (the create deadline is past), then nothing.
        taken = await coordination.take(uid, "one-ghost", maximum=1, epoch=epoch.id, taker="killed/0")
        assert taken == "granted"
        await redis.zadd(seats, {"one-ghost": epoch.now_ms - (ABANDONED_AFTER_S + 5) * 1000}, xx=True)
        if taker != "alive":
            await redis.delete(coordination.keys.alive("killed/0"))  # its heartbeat lapsed
        if taker == "killed-and-restarted":
            await coordination.heartbeat("killed/1")
        await queue(redis, 95, labels=[], repo=f"acme/{ns}")
        if taker != "killed-and-restarted":
            await passes(controller, count=3)
            assert await seated(redis, seats) == ["one-ghost"], "the taker's create may still land"
            assert runner_jobs(kube, ns) == []
            return
        (job,) = await eventually(lambda: runner_jobs(kube, ns), timeout=10)
        assert await seated(redis, seats) == [job["metadata"]["name"]]


async def _none(count: Awaitable[int]) -> bool:
    return await count == 0


async def test_a_deleted_runner_holds_its_seat_until_its_pod_is_gone(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """A deleted runner Job's Pod may still run for its grace period: its seat is freed once the Job and
    its Pods are gone, not when the delete returns, so a group never has more runner Pods than its
    maximum (here 1: the replacement of a reaped runner waits for the old Pod)."""
    fake = FakeGitea(token=API_TOKEN)
    server = await aiohttp_server(fake.app())
    ns = namespace(kube)
    url = str(server.make_url("")).rstrip("/")
    spec = {"pendingTimeout": "2s", "labels": [], "defaultLabels": [], "gitea": {"url": url}, "maxActiveRunners": 1}
    body = create_group(kube, ns, "one", **spec)
    await queue(redis, 81, labels=[])
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url) as controller:
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        first = job["metadata"]["name"]
        # No kubelet here: the runner's Pod, as the Job controller would make it, stays Pending.
        labels = {**job["spec"]["template"]["metadata"]["labels"], "batch.kubernetes.io/job-name": first}
        pod = {
            "metadata": {"name": f"{first}-p", "labels": labels},
            "spec": {"containers": [{"name": "runner", "image": "runner:test"}]},
        }
        account = {"metadata": {"name": "default"}}  # no controller-manager here makes it
        assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", account)[0] == 201
        assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/pods", pod)[0] == 201
        await eventually(lambda: events(kube, ns, "RunnerReaped"))
        await eventually(lambda: not [j for j in runner_jobs(kube, ns) if j["metadata"]["name"] == first])
        await passes(controller, count=3)
        seats = f"{{grs}}:seats:{body['metadata']['uid']}"
        assert await seated(redis, seats) == [first], "the Pod still holds the seat"
        assert [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [], "and no second runner starts"
        assert api_request(kube, "DELETE", f"/api/v1/namespaces/{ns}/pods/{first}-p?gracePeriodSeconds=0")[0] == 200
        (second,) = await eventually(lambda: runner_jobs(kube, ns))
    assert second["metadata"]["uid"] != job["metadata"]["uid"], "a new runner, once the old Pod is gone"


async def test_seats_lost_while_the_epoch_survives_come_back_on_the_next_pass(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """The seats key alone can go (evicted by a managed Redis's `volatile-lru`, a failover losing the last
    writes) while the epoch key stays: every pass seats the active runner Jobs again, so the cap holds."""
    ns = namespace(kube)
    body = create_group(kube, ns, "kept", labels=[], defaultLabels=[], maxActiveRunners=1)
    await queue(redis, 91, labels=[])
    async with running_controller(kube.kubeconfig, redis_server.url, ns) as controller:
        (first,) = await eventually(lambda: [j["metadata"]["name"] for j in runner_jobs(kube, ns)])
        seats = f"{{grs}}:seats:{body['metadata']['uid']}"
        await eventually(lambda: redis.exists(seats))
        await redis.expire(seats, 100)  # a quiet week nearly over
        await queue(redis, 90, labels=[], repo="other/unserved")  # any change makes a round
        await passes(controller, count=3)
        assert await redis.ttl(seats) > 6 * 24 * 3600, "every pass gives the seats a week's idle TTL again"
        await redis.delete(seats)
        await queue(redis, 92, labels=[])  # a second job wants a runner: only the lost seat made room
        await passes(controller, count=3)
        assert await seated(redis, seats) == [first]
        assert [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [first], "never above maxActiveRunners"


async def seated(redis: Redis, seats: str) -> list[str]:
    return [n.decode() if isinstance(n, bytes) else str(n) for n in await redis.zrange(seats, 0, -1)]


@pytest.mark.parametrize("old_gitea_answers", [True, False])
async def test_a_runner_of_the_gitea_a_group_moved_from_goes_with_its_row_there(
    kube: KubeCluster, redis_server: RedisServer, aiohttp_server: MakeServer, old_gitea_answers: bool
) -> None:
    """A group's `gitea.url` changes (a new host, a migration): its warm runner, registered with the old
    Gitea, is replaced, and its row is disabled and deleted in the old Gitea, not looked for in the new.
    An old Gitea that cannot be asked any more does not hold the runner: it is looked for in the new."""
    old, new = FakeGitea(token=API_TOKEN), FakeGitea(token=API_TOKEN)
    old_url = str((await aiohttp_server(old.app())).make_url("")).rstrip("/")
    new_url = str((await aiohttp_server(new.app())).make_url("")).rstrip("/")
    ns = namespace(kube)
    repo = f"acme/{ns}"  # no job another test left queued is this group's
    create_group(
        kube,
        ns,
        "moving",
        scope="repo",
        repo=repo,
        labels=[],
        defaultLabels=[],
        minIdleRunners=1,
        gitea={"url": old_url},
    )
    # A move to another Gitea: the admin names it (GRS_GITEA_INSTANCES), else the group would be refused.
    options: dict[str, Any] = {"gitea_url": old_url, "gitea_instances": f"new={new_url}"}
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **options):
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        warm = job["metadata"]["name"]
        row = old.add_runner(runner_of(job), scope=("repo", repo))
        old.fail_with = None if old_gitea_answers else 503
        patch = {"spec": {"gitea": {"url": new_url}}}
        path = RG.format(ns=ns) + "/moving"
        assert api_request(kube, "PATCH", path, patch, content_type="application/merge-patch+json")[0] == 200
        await eventually(lambda: warm not in [j["metadata"]["name"] for j in runner_jobs(kube, ns)])
    assert old.deleted == ([row] if old_gitea_answers else []), "its row went from the Gitea it registered with"
    assert not new.deleted


async def test_a_deleted_group_drains_busy_runners_finish_idle_ones_go_then_the_group(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """Deleting a RunnerGroup starts no runner and deletes its runners that took no job (through Gitea:
    disabled, confirmed idle, row deleted); a busy runner runs its job to the end; the finalizer holds
    the group until then, and until Gitea lists no row of its runners."""
    fake = FakeGitea(token=API_TOKEN)
    server = await aiohttp_server(fake.app())
    ns = namespace(kube)
    url = str(server.make_url("")).rstrip("/")
    create_group(kube, ns, "leaving", labels=[], defaultLabels=[], gitea={"url": url})
    path = RG.format(ns=ns) + "/leaving"
    await queue(redis, 101, labels=[])
    await queue(redis, 102, labels=[])
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url) as controller:
        names = await eventually(
            lambda: len(n := sorted(j["metadata"]["name"] for j in runner_jobs(kube, ns))) == 2 and n
        )
        await eventually(
            lambda: "gitea.bpg.pw/runners" in (api_request(kube, "GET", path)[1]["metadata"].get("finalizers") or [])
        )
        busy, idle = names
        runners = {j["metadata"]["name"]: runner_of(j) for j in runner_jobs(kube, ns)}
        busy_row, idle_row = fake.add_runner(runners[busy], busy=True), fake.add_runner(runners[idle])
        taken = JobUpdate.from_payload(model("in_progress", job_id=101, labels=[], repo="acme/widgets"))
        await JobStore(redis).record(dataclasses.replace(taken, runner_name=runners[busy]))
        await passes(controller, count=2)

        assert api_request(kube, "DELETE", path)[0] == 200
        await eventually(lambda: [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [busy])
        assert fake.deleted == [idle_row] and not fake.runners.get(idle_row), "the idle runner went with its row"
        await passes(controller, count=3)
        assert api_request(kube, "GET", path)[0] == 200, "the busy runner holds the group"
        assert [j["metadata"]["name"] for j in runner_jobs(kube, ns)] == [busy], "and is not deleted"
        assert len(runner_jobs(kube, ns)) == 1, "no runner started for the job still queued"

        complete_job(kube, ns, busy)  # its job done; Gitea removed its (ephemeral) row with it
        del fake.runners[busy_row]
        await eventually(lambda: api_request(kube, "GET", path)[0] == 404)
    assert busy_row not in fake.deleted


async def test_the_finalizer_goes_beside_and_leaves_without_another_controllers(
    kube: KubeCluster, redis_server: RedisServer, aiohttp_server: MakeServer
) -> None:
    server = await aiohttp_server(FakeGitea(token=API_TOKEN).app())
    ns = namespace(kube)
    body = group("shared", labels=[], defaultLabels=[], gitea={"url": str(server.make_url("")).rstrip("/")})
    body["metadata"]["finalizers"] = ["example.com/other"]
    assert api_request(kube, "POST", RG.format(ns=ns), body)[0] == 201
    path = RG.format(ns=ns) + "/shared"
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=_url(server)):
        both = ["example.com/other", "gitea.bpg.pw/runners"]
        await eventually(lambda: api_request(kube, "GET", path)[1]["metadata"].get("finalizers") == both)
        assert api_request(kube, "DELETE", path)[0] == 200
        await eventually(lambda: api_request(kube, "GET", path)[1]["metadata"].get("finalizers") == both[:1])


@pytest.mark.parametrize("restarted", [False, True], ids=["token-kept", "controller-restarted"])
async def test_a_group_deleted_with_its_token_secret_goes(
    kube: KubeCluster, redis_server: RedisServer, aiohttp_server: MakeServer, restarted: bool
) -> None:
    """GitOps deletes a RunnerGroup and its token Secret together while it has a warm runner. The
    controller that served it drains it with the API token it last read: the warm runner is asked about
    in Gitea, its row and Job deleted, and the group goes. A controller started since never read the
    token: the drain is abandoned (DrainAbandoned), the warm runner goes without asking Gitea, its row
    stays there, and the group goes all the same."""
    fake = FakeGitea(token=API_TOKEN)
    url = str((await aiohttp_server(fake.app())).make_url("")).rstrip("/")
    ns = namespace(kube)
    repo = f"acme/{ns}"  # no job another test left queued is this group's
    spec: dict[str, Any] = {"scope": "repo", "repo": repo, "labels": [], "defaultLabels": [], "minIdleRunners": 1}
    create_group(kube, ns, "gitops", gitea={"url": url}, **spec)
    path = RG.format(ns=ns) + "/gitops"

    def delete_both() -> None:
        assert api_request(kube, "DELETE", f"/api/v1/namespaces/{ns}/secrets/gitea")[0] == 200
        assert api_request(kube, "DELETE", path)[0] == 200

    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url) as controller:
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        row = fake.add_runner(runner_of(job), scope=("repo", repo))
        await eventually(
            lambda: "gitea.bpg.pw/runners" in (api_request(kube, "GET", path)[1]["metadata"].get("finalizers") or [])
        )
        await passes(controller, count=2)
        if not restarted:
            delete_both()
            await eventually(lambda: api_request(kube, "GET", path)[0] == 404, timeout=30)
    if restarted:
        delete_both()
        async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url):
            await eventually(lambda: api_request(kube, "GET", path)[0] == 404, timeout=30)
    assert not runner_jobs(kube, ns) or all(j["metadata"].get("deletionTimestamp") for j in runner_jobs(kube, ns))
    abandoned = events(kube, ns, "DrainAbandoned")
    if restarted:
        assert len(abandoned) == 1 and "Secret" in abandoned[0]["message"], abandoned
        assert fake.deleted == [] and row in fake.runners, "Gitea was not asked: the row stays"
    else:
        assert abandoned == [] and fake.deleted == [row], "asked in Gitea: its row went with it"
        assert fake.requests["repo_runner_disable"] == 1


def _running_pod(kube: KubeCluster, ns: str, job: dict[str, Any]) -> str:
    """The Pod the Job controller and a kubelet would make for `job`, Running (neither runs here)."""
    name = job["metadata"]["name"]
    labels = {**job["spec"]["template"]["metadata"]["labels"], "batch.kubernetes.io/job-name": name}
    pod = {
        "metadata": {"name": f"{name}-p", "labels": labels},
        "spec": {"containers": [{"name": "runner", "image": "r"}]},
    }
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/pods", pod)[0] == 201
    started = {"running": {"startedAt": "2026-01-01T00:00:00Z"}}
    running = {"phase": "Running", "containerStatuses": [{"name": "runner", "ready": True, "state": started}]}
    patch = f"/api/v1/namespaces/{ns}/pods/{name}-p/status"
    assert api_request(kube, "PATCH", patch, {"status": running}, content_type="application/merge-patch+json")[0] == 200
    return f"{name}-p"


def _refuse_pod_as_the_job_controller_does(kube: KubeCluster, ns: str, job: dict[str, Any]) -> str:
    """Try to create the runner Job's Pod (the API server's admission decides), and record the refusal
    as the Job controller does: a `FailedCreate` Warning Event on the Job. Its message."""
    meta = job["metadata"]
    pod = {"metadata": {"generateName": f"{meta['name']}-"}, "spec": job["spec"]["template"]["spec"]}
    status, body = api_request(kube, "POST", f"/api/v1/namespaces/{ns}/pods", pod)
    assert status == 403, body
    involved = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "namespace": ns, "uid": meta["uid"]}
    event = {
        "metadata": {"generateName": f"{meta['name']}."},
        "involvedObject": involved,
        "type": "Warning",
        "reason": "FailedCreate",
        "message": f"Error creating: {body['message']}",
        "source": {"component": "job-controller"},
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/events", event)[0] == 201
    return str(body["message"])


async def test_a_runner_pod_the_namespaces_pod_security_refuses_is_reported_within_seconds(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """The default runner image is privileged; a namespace at Pod Security `baseline` refuses its Pod, so
    the runner Job never gets one. The group says so, with the API server's message, within seconds
    (not a Pending runner reaped at its `pendingTimeout`): `RunnersAdmitted` False, and an Event."""
    ns = _pss_namespace(kube, "baseline")
    secret = {"metadata": {"name": "gitea"}, "stringData": {"api": API_TOKEN, "reg": REG_TOKEN}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", secret)[0] == 201
    create_group(kube, ns, "strict", scope="repo", repo=f"acme/{ns}", labels=[], defaultLabels=[])
    await queue(redis, 131, labels=[], repo=f"acme/{ns}")
    async with running_controller(kube.kubeconfig, redis_server.url, ns):
        (job,) = await eventually(lambda: runner_jobs(kube, ns))

        def admitted() -> dict[str, Any]:
            return dict(group_status(kube, ns, "strict")["conditions"].get("RunnersAdmitted") or {})

        assert (await eventually(lambda: admitted().get("status") == "True" and admitted()))["reason"] == "Admitted"
        refusal = _refuse_pod_as_the_job_controller_does(kube, ns, job)
        assert 'violates PodSecurity "baseline:latest"' in refusal
        condition = await eventually(lambda: admitted().get("status") == "False" and admitted(), timeout=15)
        assert condition["reason"] == "PodRefused" and refusal in condition["message"]
        assert job["metadata"]["name"] in condition["message"]
        (event,) = await eventually(lambda: events(kube, ns, "RunnerPodRefused"))
        assert refusal in event["message"] and event["involvedObject"]["kind"] == "RunnerGroup"


def _evict(kube: KubeCluster, ns: str, pod: str) -> int:
    """What `kubectl drain` and the cluster autoscaler do to a Pod: the Eviction API."""
    body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": ns}}
    return api_request(kube, "POST", f"/api/v1/namespaces/{ns}/pods/{pod}/eviction", body)[0]


async def test_a_busy_runner_cannot_be_evicted_an_idle_one_can(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """A runner running a job gets a PodDisruptionBudget over its Job's Pods, owned by the Job: the
    Eviction API (`kubectl drain`, the cluster autoscaler) refuses to evict it. An idle runner has
    none: evicted, it is replaced. A busy runner that dies anyway is reported: RunnerLost."""
    server = await aiohttp_server(FakeGitea(token=API_TOKEN).app())
    ns = namespace(kube)
    repo, url = f"acme/{ns}", str(server.make_url("")).rstrip("/")  # no job another test left queued is this group's
    create_group(kube, ns, "drained", scope="repo", repo=repo, labels=[], defaultLabels=[], gitea={"url": url})
    await queue(redis, 111, labels=[], repo=repo)
    await queue(redis, 112, labels=[], repo=repo)
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url) as controller:
        two = await eventually(lambda: len(runner_jobs(kube, ns)) == 2 and runner_jobs(kube, ns))
        jobs = sorted(two, key=lambda j: j["metadata"]["name"])
        assert len(jobs) == 2
        account = {"metadata": {"name": "default"}}  # no controller-manager here makes it
        assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/serviceaccounts", account)[0] == 201
        busy_pod, idle_pod = (_running_pod(kube, ns, j) for j in jobs)
        busy = jobs[0]["metadata"]
        taken = JobUpdate.from_payload(model("in_progress", job_id=111, labels=[], repo=repo))
        await JobStore(redis).record(dataclasses.replace(taken, runner_name=runner_of(jobs[0])))

        budgets = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
        (pdb,) = await eventually(lambda: api_request(kube, "GET", budgets)[1]["items"])
        assert pdb["metadata"]["name"] == busy["name"]
        assert [o["uid"] for o in pdb["metadata"]["ownerReferences"]] == [busy["uid"]], "it goes with the Job"
        assert pdb["spec"] == {
            "minAvailable": 1,
            "selector": {"matchLabels": {"batch.kubernetes.io/job-name": busy["name"]}},
        }
        assert _evict(kube, ns, busy_pod) == 429, "the busy runner stays"
        assert _evict(kube, ns, idle_pod) == 201, "the idle one may go"
        await passes(controller, count=2)
        assert len(api_request(kube, "GET", budgets)[1]["items"]) == 1, "one budget, made once"

        fail_job(kube, ns, busy["name"])  # it died anyway (OOM-killed, its node lost)
        (lost,) = await eventually(lambda: events(kube, ns, "RunnerLost"))
        assert lost["message"].startswith(f"Runner Job {busy['name']} died during its job (BackoffLimitExceeded)")
        assert controller.metrics.runners_lost.labels(group=f"{ns}/drained")._value.get() == 1


# -- ownership is proven, not claimed (issue 35) ----------------------------------------------------------


def tenant_namespace(kube: KubeCluster, prefix: str, *, api: str, reg: str = REG_TOKEN) -> str:
    """A namespace named `prefix-…` (namespaces sort by it) whose Secret `gitea` holds these tokens."""
    ns = f"{prefix}-{uuid.uuid4().hex[:8]}"
    assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
    secret = {"metadata": {"name": "gitea"}, "stringData": {"api": api, "reg": reg}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", secret)[0] == 201
    return ns


def creates_refused(controller: Controller, group: str) -> float:
    """How many of the group's runner creates were refused (`grs_runner_creates_refused`), for any reason."""
    samples = [s for metric in controller.metrics.creates_refused.collect() for s in metric.samples]
    return sum(s.value for s in samples if s.name.endswith("_total") and s.labels["group"] == group)


def condition_is(kube: KubeCluster, ns: str, name: str, kind: str, reason: str) -> dict[str, Any] | None:
    cond = condition(kube, ns, name, kind)
    return cond if cond and cond["reason"] == reason else None


async def test_of_two_namespaces_naming_one_repo_the_one_that_cannot_prove_it_gets_nothing(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """A RunnerGroup author names another tenant's repository to capture its jobs. Their namespace sorts
    first (the tie-break that gave it the jobs), but their API token cannot list the repository's
    runners (403): their group takes nothing and says so; the repository's own group gets the runner."""
    repo = f"acme/{uuid.uuid4().hex[:8]}"
    tenants = {API_TOKEN: Tenant("owner", frozenset({("repo", repo)})), "thief-token": Tenant("thief")}
    gitea = TenantGitea(tenants)
    url = _url(await aiohttp_server(gitea.app()))
    thief, owner = tenant_namespace(kube, "a", api="thief-token"), tenant_namespace(kube, "b", api=API_TOKEN)
    for ns in (thief, owner):
        create_group(kube, ns, "ci", scope="repo", repo=repo, org=None, gitea={"url": url}, defaultLabels=[])
    await queue(redis, 351, labels=["k8s"], repo=repo)
    options: dict[str, Any] = {"prover": None, "gitea_url": url}
    async with running_controller(kube.kubeconfig, redis_server.url, f"{thief},{owner}", **options) as controller:
        (job,) = await eventually(lambda: runner_jobs(kube, owner))
        refused = await eventually(lambda: condition_is(kube, thief, "ci", "ScopeProven", "TokenCannotAdminister"))
        await passes(controller)
        assert runner_jobs(kube, thief) == []
        ready = condition(kube, thief, "ci", "Ready") or {}
        proven = condition(kube, owner, "ci", "ScopeProven") or {}
    assert job["metadata"]["annotations"][JOB_ID_ANNOTATION] == "351"
    assert f"cannot administer repo {repo}" in refused["message"] and "HTTP 403" in refused["message"], refused
    assert "thief-token" not in refused["message"]
    assert (ready["status"], ready["reason"]) == ("False", "TokenCannotAdminister"), ready
    assert (proven["status"], proven["reason"]) == ("True", "Proven"), proven


async def test_a_stale_repo_group_whose_token_was_revoked_no_longer_starves_the_org_group(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis, aiohttp_server: MakeServer
) -> None:
    """A repository group left behind: its registration token no longer registers anything, and its API
    token is revoked in Gitea. Its scope is the most specific, so it took the repository's jobs and
    could start no runner for them, for good. Once Gitea answers its token 401 (asked every
    GRS_POLL_INTERVAL), its jobs go to the org's group."""
    owner = f"o{uuid.uuid4().hex[:8]}"
    repo = f"{owner}/widgets"
    admin, former = Tenant("admin", frozenset({("org", owner)})), Tenant("former", frozenset({("repo", repo)}))
    gitea = TenantGitea({API_TOKEN: admin, "stale": former})
    url = _url(await aiohttp_server(gitea.app()))
    stale = tenant_namespace(kube, "a", api="stale", reg="a-registration-token-gitea-forgot")
    org = tenant_namespace(kube, "b", api=API_TOKEN)
    create_group(kube, stale, "ci", scope="repo", repo=repo, org=None, gitea={"url": url}, defaultLabels=[])
    create_group(kube, org, "ci", scope="org", org=owner, gitea={"url": url}, defaultLabels=[])
    options: dict[str, Any] = {"prover": None, "gitea_url": url, "poll_interval": 1}
    async with running_controller(kube.kubeconfig, redis_server.url, f"{stale},{org}", **options) as controller:
        await eventually(lambda: condition_is(kube, stale, "ci", "ScopeProven", "Proven"))
        gitea.revoke("stale")
        revoked = await eventually(lambda: condition_is(kube, stale, "ci", "ScopeProven", "TokenCannotAdminister"))
        await queue(redis, 352, labels=["k8s"], repo=repo)
        (job,) = await eventually(lambda: runner_jobs(kube, org))
        await passes(controller)
        assert runner_jobs(kube, stale) == []
        assert creates_refused(controller, f"{stale}/ci") == 0, "never given the job: it did not even try"
    assert job["metadata"]["annotations"][JOB_ID_ANNOTATION] == "352"
    assert "HTTP 401" in revoked["message"], revoked


async def test_a_repo_group_whose_registrations_gitea_refuses_gives_its_jobs_to_the_org_group(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """A repository group whose API token still administers its scope, but whose registration token
    Gitea refuses: it is demoted as soon as its create is refused, and its job falls back to the org's
    group. Alone, it would still be given the job (no group else can run it)."""
    owner = f"o{uuid.uuid4().hex[:8]}"
    repo = f"{owner}/widgets"
    refused, org = tenant_namespace(kube, "a", api=API_TOKEN, reg="refused-registration"), namespace(kube)
    create_group(kube, refused, "ci", scope="repo", repo=repo, org=None, defaultLabels=[])
    create_group(kube, org, "ci", scope="org", org=owner, defaultLabels=[])
    await queue(redis, 353, labels=["k8s"], repo=repo)
    async with running_controller(kube.kubeconfig, redis_server.url, f"{refused},{org}") as controller:
        said = await eventually(lambda: _runners_admitted(kube, refused, "ci", "RegistrationRefused"))
        (job,) = await eventually(lambda: runner_jobs(kube, org))
        await passes(controller)
        assert runner_jobs(kube, refused) == []
        assert creates_refused(controller, f"{refused}/ci") == 1, "refused once, then its job went elsewhere"
    assert job["metadata"]["annotations"][JOB_ID_ANNOTATION] == "353"
    assert f"Secret {refused}/gitea, key reg" in said["message"]


async def test_a_namespace_the_admin_pinned_to_its_owners_cannot_serve_another(
    kube: KubeCluster, redis_server: RedisServer, redis: Redis
) -> None:
    """GRS_NAMESPACE_OWNERS pins each namespace to the Gitea owners it may serve: a group of the namespace
    naming another owner is InvalidSpec naming the setting and gets no job; one naming its own runs."""
    ns = namespace(kube)
    mine, theirs = f"m{uuid.uuid4().hex[:8]}", f"t{uuid.uuid4().hex[:8]}"
    create_group(kube, ns, "theirs", scope="repo", repo=f"{theirs}/widgets", org=None, defaultLabels=[])
    create_group(kube, ns, "mine", scope="org", org=mine.upper(), defaultLabels=[])
    await queue(redis, 354, labels=["k8s"], repo=f"{theirs}/widgets")
    await queue(redis, 355, labels=["k8s"], repo=f"{mine}/widgets")
    options: dict[str, Any] = {"namespace_owners": f"{ns}={mine}|someone-else"}
    async with running_controller(kube.kubeconfig, redis_server.url, ns, **options) as controller:
        refused = await eventually(lambda: condition_is(kube, ns, "theirs", "Ready", "InvalidSpec"))
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        await passes(controller)
        assert len(runner_jobs(kube, ns)) == 1
    assert job["metadata"]["labels"][GROUP_LABEL] == "mine"
    assert f"spec.repo {theirs}/widgets: namespace {ns} may serve only the Gitea owners" in refused["message"]
    assert "GRS_NAMESPACE_OWNERS" in refused["message"], refused


async def _one_warm_runner_group(
    kube: KubeCluster, aiohttp_server: MakeServer, name: str
) -> tuple[FakeGitea, str, str, str]:
    """A fake Gitea and a group `name` of one repository keeping one warm runner, in a namespace of its own:
    (the fake, its URL, the namespace, the repository)."""
    fake = FakeGitea(token=API_TOKEN)
    url = str((await aiohttp_server(fake.app())).make_url("")).rstrip("/")
    ns = namespace(kube)
    repo = f"acme/{ns}"
    spec: dict[str, Any] = {"scope": "repo", "repo": repo, "labels": [], "defaultLabels": [], "minIdleRunners": 1}
    create_group(kube, ns, name, gitea={"url": url}, **spec)
    return fake, url, ns, repo


class _DeletesOnFirstRegister(FakeRegistrar):
    """Deletes an object at `path` while the group's first runner registers: inside the pass, after its
    start, before its end (GitOps deleting the group, or its token Secret, the moment it syncs them)."""

    def __init__(self, kube: KubeCluster, path: str, rows: tuple[FakeGitea, str] | None = None) -> None:
        super().__init__(tokens={REG_TOKEN})
        self.kube, self.path, self.gone = kube, path, False
        self.rows, self.row = rows, 0  # with `rows` (a fake Gitea, a repository): the row Gitea made, as it does

    async def register(self, url: str, token: str, *, name: str, labels: Sequence[str]) -> Registration:
        made = await super().register(url, token, name=name, labels=labels)
        if not self.gone:
            self.gone = True
            if self.rows is not None:
                self.row = self.rows[0].add_runner(name, scope=("repo", self.rows[1]))
            assert api_request(self.kube, "DELETE", self.path)[0] == 200
        return made


async def test_a_token_secret_deleted_while_the_first_runner_registers_still_drains_the_group(
    kube: KubeCluster, redis_server: RedisServer, aiohttp_server: MakeServer
) -> None:
    """The token is read before a pass registers its first runner, not after: the Secret deleted during
    that registration (seen on the node, a runner shown in Gitea and GitOps deleting both at once) leaves
    the drain the token it needs, and no DrainAbandoned."""
    fake, url, ns, repo = await _one_warm_runner_group(kube, aiohttp_server, "gitops")
    path = RG.format(ns=ns) + "/gitops"
    registrar = _DeletesOnFirstRegister(kube, f"/api/v1/namespaces/{ns}/secrets/gitea")
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url, registrar=registrar):
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        row = fake.add_runner(runner_of(job), scope=("repo", repo))
        await eventually(
            lambda: "gitea.bpg.pw/runners" in (api_request(kube, "GET", path)[1]["metadata"].get("finalizers") or [])
        )
        assert registrar.gone
        assert api_request(kube, "DELETE", path)[0] == 200
        await eventually(lambda: api_request(kube, "GET", path)[0] == 404, timeout=30)
    assert events(kube, ns, "DrainAbandoned") == [] and fake.deleted == [row], "asked in Gitea: its row went"


async def test_a_group_deleted_while_its_first_runner_registers_is_held_until_that_runner_is_drained(
    kube: KubeCluster, redis_server: RedisServer, aiohttp_server: MakeServer
) -> None:
    """The group has its finalizer before its first runner registers in Gitea, not after its first pass:
    deleted during that registration, it stays Terminating until the drain removed the runner's row, where
    it once vanished at once and left the row in Gitea for good."""
    fake, url, ns, repo = await _one_warm_runner_group(kube, aiohttp_server, "pruned")
    path = RG.format(ns=ns) + "/pruned"
    registrar = _DeletesOnFirstRegister(kube, path, rows=(fake, repo))  # its row in Gitea before the drain
    async with running_controller(kube.kubeconfig, redis_server.url, ns, gitea_url=url, registrar=registrar):
        await eventually(lambda: registrar.gone)
        await eventually(lambda: api_request(kube, "GET", path)[0] == 404, timeout=30)
    assert registrar.row and fake.deleted == [registrar.row], "the deleted group's runner left its row in Gitea"
