"""End to end with a REAL Gitea: its own workflow_job webhooks and its own API drive our real processes.

A push to a real Gitea queues jobs; Gitea delivers signed `workflow_job` webhooks to a real
`webhook-scaler`; a real `reconciler` creates runner Jobs in a real kube-apiserver. This API server
has no node, so the runner Jobs stay Pending and the jobs stay queued: these tests look at the
decisions alone (which jobs get a runner, from which signal). test_node.py runs the same product on a
real node, where act_runner Pods take the jobs.

Each test has a RunnerGroup, runner label and repository of its own, and a test that turns polling on
or stops the receiver puts it back: the order they run in does not matter.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.e2e.harness import Gitea, Service, deliveries, our_services
from tests.e2e.node_stack import wait_for
from tests.fake_gitea import SwaggerValidator
from tests.groups import spec_dict
from tests.kube_cluster import KubeCluster, api_request
from tests.redis_server import RedisServer

pytestmark = pytest.mark.kube
SECRET = "e2e-webhook-secret"
NS = "e2e"
TOKENS = "gitea-runner-tokens"
RG_PATH = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{NS}/runnergroups"


@dataclass
class Stack:
    gitea: Gitea
    receiver: Service
    reconciler: Service
    kube: KubeCluster
    receiver_url: str
    metrics_url: str

    def reconfigured(self, **env: str) -> AbstractContextManager[None]:
        """The reconciler restarted with some settings changed (e.g. polling on), and as it was afterwards."""
        return self.reconciler.reconfigured(port=urlsplit(self.metrics_url).port, **env)

    def group(self) -> str:
        """A RunnerGroup of the test's own, for org jobs that run on a label of its own: that label (and name)."""
        label = f"e2e-{uuid.uuid4().hex[:6]}"
        spec = spec_dict(
            gitea={"url": self.gitea.url},
            labels=[f"{label}:host"],
            defaultLabels=[],
            maxActiveRunners=10,
            registrationToken={"secretRef": {"name": TOKENS, "key": "registration-token"}},
            authToken={"secretRef": {"name": TOKENS, "key": "api-token"}},
        )
        body = {"apiVersion": "gitea.bpg.pw/v1alpha1", "kind": "RunnerGroup", "metadata": {"name": label}, "spec": spec}
        assert api_request(self.kube, "POST", RG_PATH, body)[0] == 201
        return label

    def metrics(self) -> dict[str, float]:
        """The reconciler's own metrics without labels, by name (since it started)."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as resp:
            text = resp.read().decode()
        return {
            line.split(" ")[0]: float(line.split(" ")[1])
            for line in text.splitlines()
            if line.startswith("grs_") and "{" not in line
        }

    def time_to_runner(self) -> tuple[float, int]:
        """The reconciler's own histogram of queued -> runner Job created: (sum of seconds, count) since it
        started; a test compares two readings, since the tests before it added theirs."""
        values = self.metrics()
        return values.get("grs_time_to_runner_seconds_sum", 0.0), int(values.get("grs_time_to_runner_seconds_count", 0))

    def group_passes(self) -> int:
        """How many group passes the reconciler ran (not skipped) since it started."""
        return int(self.metrics().get("grs_reconcile_duration_seconds_count", 0))

    def more_passes(self, count: int = 3) -> None:
        """Until the reconciler ran `count` more passes of every group, as many as a resync's rounds run (a
        resync, every second here, lets no group's pass skip): what a pass would still do has been done."""
        groups = len(api_request(self.kube, "GET", RG_PATH)[1]["items"])
        target = self.group_passes() + count * groups
        wait_for(lambda: self.group_passes() >= target, timeout=30, what=f"{count} more passes of {groups} groups")


def workflow(*independent: str, label: str, dependent: str | None = None) -> str:
    lines = ["name: ci", "on: [push]", "jobs:"]
    for name in independent:
        lines += [f"  {name}:", f"    runs-on: {label}", "    steps:", f"      - run: echo {name}"]
    if dependent:
        lines += [
            f"  {dependent}:",
            f"    runs-on: {label}",
            f"    needs: [{independent[0]}]",
            "    steps:",
            "      - run: echo after",
        ]
    return "\n".join(lines) + "\n"


def runner_jobs(kube: KubeCluster) -> list[dict[str, Any]]:
    return list(api_request(kube, "GET", f"/apis/batch/v1/namespaces/{NS}/jobs")[1]["items"])


@pytest.fixture(scope="module")
def stack(kube: KubeCluster, redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("e2e")
    gitea = Gitea(workdir / "gitea")
    gitea.start()
    gitea.api("POST", "/orgs", {"username": "acme"})
    reg_token = gitea.api("POST", "/orgs/acme/actions/runners/registration-token")["token"]

    assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})[0] in (201, 409)
    data = {"registration-token": reg_token, "api-token": gitea.token}
    secret = {
        "metadata": {"name": TOKENS},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }
    assert api_request(kube, "POST", f"/api/v1/namespaces/{NS}/secrets", secret)[0] == 201

    receiver, port, reconciler, metrics_port = our_services(
        workdir,
        redis_url=redis_server.url,
        kubeconfig=kube.kubeconfig,
        namespace=NS,
        secret=SECRET,
        GRS_REDIS_PREFIX=f"e2e{uuid.uuid4().hex[:6]}",
        GRS_POLL_ENABLED="false",
        GRS_POLL_INTERVAL="3",
        GRS_POLL_JITTER="0",
        GRS_RESYNC_INTERVAL="1",  # a pass of every group each second: `Stack.more_passes` waits on them
        GRS_GITEA_URL=gitea.url,
    )
    receiver.env["GRS_REDIS_PREFIX"] = reconciler.env["GRS_REDIS_PREFIX"]
    receiver.start(port=port)
    reconciler.start(port=metrics_port)
    receiver_url = f"http://127.0.0.1:{port}/webhook"
    try:
        yield Stack(gitea, receiver, reconciler, kube, receiver_url, f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        reconciler.stop()
        receiver.stop()
        gitea.stop()


def new_repo(gitea: Gitea) -> str:
    name = f"r{uuid.uuid4().hex[:6]}"
    gitea.api("POST", "/orgs/acme/repos", {"name": name, "auto_init": True, "default_branch": "main"})
    return f"acme/{name}"


def add_webhook(gitea: Gitea, repo: str, url: str) -> int:
    hook = gitea.api(
        "POST",
        f"/repos/{repo}/hooks",
        {
            "type": "gitea",
            "active": True,
            "events": ["workflow_job"],
            "config": {"url": url, "content_type": "json", "secret": SECRET},
        },
    )
    return int(hook["id"])


def jobs_for(kube: KubeCluster, ids: set[int]) -> list[dict[str, Any]]:
    return [j for j in runner_jobs(kube) if int(j["metadata"]["annotations"].get("gitea.bpg.pw/job-id", 0)) in ids]


def gitea_jobs(gitea: Gitea, repo: str, status: str) -> list[dict[str, Any]]:
    body = gitea.api("GET", f"/repos/{repo}/actions/jobs?status={status}&page=1&limit=50")
    SwaggerValidator().response("/repos/{owner}/{repo}/actions/jobs", body)  # the fake's spec holds for real
    return list(body["jobs"])


def test_webhooks_from_a_real_gitea_start_one_runner_per_queued_job(stack: Stack) -> None:
    gitea, kube = stack.gitea, stack.kube  # polling is off: only webhooks can start these runners
    label, before = stack.group(), stack.time_to_runner()
    repo = new_repo(gitea)
    add_webhook(gitea, repo, stack.receiver_url)
    pushed, pushed_at = time.monotonic(), time.time()
    text = workflow("a", "b", "c", label=label, dependent="after")
    gitea.push_file(repo, ".gitea/workflows/ci.yml", text, message="ci")

    queued = wait_for(lambda: len(q := gitea_jobs(gitea, repo, "queued")) == 3 and q, timeout=60, what="3 queued")
    waiting = gitea_jobs(gitea, repo, "waiting")
    assert [j["name"] for j in waiting] == ["after"]
    ids = {j["id"] for j in queued}
    created = wait_for(lambda: len(j := jobs_for(kube, ids)) == 3 and j, timeout=30, what="3 runner Jobs")
    elapsed = time.monotonic() - pushed
    stack.more_passes()  # still exactly one runner per queued job, none for the blocked one
    assert len(jobs_for(kube, ids | {w["id"] for w in waiting})) == 3
    applied = {(d["job_id"], d["action"]) for d in deliveries(stack.receiver) if d["outcome"] == "applied"}
    assert {(i, "queued") for i in ids} <= applied
    assert (waiting[0]["id"], "waiting") in applied
    for job in created:
        pod = job["spec"]["template"]["spec"]
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        assert env["GITEA_INSTANCE_URL"]["value"] == gitea.url
        assert env["GITEA_RUNNER_LABELS"]["value"] == f"{label}:host"
        assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in env and "secretKeyRef" not in json.dumps(pod)
        # The controller registered the runner: the Pod mounts its own credential, a Secret named as it.
        (credential,) = [v for v in pod["volumes"] if v["name"] == "runner-credential"]
        assert credential["secret"]["secretName"] == job["metadata"]["annotations"]["gitea.bpg.pw/runner-name"]
    total, count = (now - then for now, then in zip(stack.time_to_runner(), before, strict=True))
    assert count == 3
    mean = total / count
    received = min(
        datetime.fromisoformat(d["time"]).timestamp() for d in deliveries(stack.receiver) if d["job_id"] in ids
    )
    print(
        f"\n[e2e] push -> first queued webhook received: {received - pushed_at:.2f}s (Gitea's own latency); "
        f"queued webhook recorded -> runner Job created: mean {mean * 1000:.0f} ms; "
        f"push -> 3 runner Jobs seen by the test: {elapsed:.2f}s"
    )


def test_polling_fallback_when_no_webhook_arrives(stack: Stack) -> None:
    gitea, kube = stack.gitea, stack.kube
    label, logged = stack.group(), len(stack.reconciler.log())
    repo = new_repo(gitea)  # no webhook on this repository at all
    with stack.reconfigured(GRS_POLL_ENABLED="true"):
        pushed = time.monotonic()
        gitea.push_file(repo, ".gitea/workflows/ci.yml", workflow("solo", label=label), message="ci")
        queued = wait_for(lambda: gitea_jobs(gitea, repo, "queued"), timeout=60, what="queued job")
        ids = {j["id"] for j in queued}
        wait_for(lambda: jobs_for(kube, ids), timeout=15, what="a runner Job from the poller")
        print(f"\n[e2e] push -> runner Job without any webhook (poll interval 3 s): {time.monotonic() - pushed:.2f}s")
    assert "poll healed redis" in stack.reconciler.log()[logged:]


def test_receiver_stopped_then_back(stack: Stack) -> None:
    gitea, kube = stack.gitea, stack.kube
    label = stack.group()
    repo = new_repo(gitea)
    add_webhook(gitea, repo, stack.receiver_url)
    with stack.reconfigured(GRS_POLL_ENABLED="true"):  # the poller finds what the outage lost
        stack.receiver.stop()
        try:
            gitea.push_file(repo, ".gitea/workflows/ci.yml", workflow("x", "y", label=label), message="ci")
            queued = wait_for(lambda: len(q := gitea_jobs(gitea, repo, "queued")) == 2 and q, timeout=60, what="queued")
            ids = {j["id"] for j in queued}
            wait_for(lambda: len(jobs_for(kube, ids)) == 2, timeout=15, what="runner Jobs from the poller")
        finally:
            stack.receiver.start(port=urlsplit(stack.receiver_url).port)
        # Gitea's deliveries during the outage failed and are not retried; nothing was started twice.
        stack.more_passes()
        assert len(jobs_for(kube, ids)) == 2


def test_runnergroup_status_reflects_gitea(stack: Stack) -> None:
    label = stack.group()
    repo = new_repo(stack.gitea)
    add_webhook(stack.gitea, repo, stack.receiver_url)

    def status() -> dict[str, Any]:
        return dict(api_request(stack.kube, "GET", f"{RG_PATH}/{label}")[1].get("status") or {})

    def reachable(got: dict[str, Any]) -> bool:
        return any(c["type"] == "GiteaReachable" and c["status"] == "True" for c in got.get("conditions") or [])

    with stack.reconfigured(GRS_POLL_ENABLED="true"):  # GiteaReachable and lastCheckTime come from a poll
        stack.gitea.push_file(repo, ".gitea/workflows/ci.yml", workflow("a", "b", label=label), message="ci")
        got = wait_for(
            lambda: (s := status()).get("queuedJobs") == 2 and s.get("activeRunners") == 2 and reachable(s) and s,
            timeout=60,
            what="the status: 2 queued jobs, 2 runners, Gitea reachable",
            explain=lambda: str(status()),
        )
    conds = {c["type"]: c for c in got["conditions"]}
    assert conds["Ready"]["status"] == "True", conds["Ready"]
    assert got["lastCheckTime"]
