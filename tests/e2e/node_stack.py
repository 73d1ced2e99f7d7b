"""The whole product on a real node: Gitea, Redis, our two processes, runner Pods running act_runner.

`NodeStack` is what the end-to-end tests, the sandbox (`tests/e2e/sandbox.sh`) and the node
benchmark share: a real Gitea listening on the node's address (runner Pods reach it there), an org
with a registration token, our `webhook-scaler` and `reconciler` as real processes, and helpers to
make RunnerGroups, repositories with webhooks, and to wait for what Gitea reports about runs.
TEST HARNESS ONLY.
"""

from __future__ import annotations

import base64
import contextlib
import socket
import time
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from reconciler.kube.crd import crd
from tests.e2e.harness import Gitea, Service, deliveries, our_services
from tests.e2e.watch import finished
from tests.kube_cluster import api_request, apply_crd
from tests.node.cluster import NODE_IP, NODE_NAME, NodeCluster, image
from tests.node.pki import Pair
from tests.redis_server import RedisServer, free_port

ORG = "acme"
SECRET = "node-e2e-webhook-secret"
TOKENS = "gitea-runner-tokens"
T = TypeVar("T")


def wait_for(
    check: Callable[[], T | Literal[False] | None],
    *,
    timeout: float,
    what: str,
    every: float = 0.2,
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll `check` until it returns something truthy, and return that; on a timeout, say what `explain`
    finds (the state a reader needs to tell why)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(every)
    detail = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"{what}: not within {timeout}s{detail}")


def workflow(*jobs: str, label: str, needs: str | None = None, step: str = "echo hello from $GITHUB_JOB") -> str:
    """A push workflow: one job per name (each running `step`), and optionally one that needs them all."""
    lines = ["name: ci", "on: [push]", "jobs:"]
    for name in jobs:
        lines += [f"  {name}:", f"    runs-on: {label}", "    steps:", f"      - run: {step}"]
    if needs:
        lines += [f"  {needs}:", f"    runs-on: {label}", f"    needs: [{', '.join(jobs)}]"]
        lines += ["    steps:", "      - run: echo after"]
    return "\n".join(lines) + "\n"


class Gate:
    """What holds a job until the test lets it go on: `step` is a job step (bash) that waits until something
    listens on a port of the node's address, which nothing does until `open()`. A job runs exactly as long
    as the test needs it to, not a fixed time that is too long or, on a loaded machine, too short."""

    def __init__(self, *, host: str = NODE_IP, tries: int = 1800) -> None:
        self.host, self.port, self.tries = host, free_port(), tries
        self._server: socket.socket | None = None

    @property
    def step(self) -> str:
        """The step's shell text: it tries twice a second, and fails after `tries` (15 minutes) shut."""
        return (
            f"for i in $(seq {self.tries}); do (exec 3<>/dev/tcp/{self.host}/{self.port}) 2>/dev/null && exit 0; "
            "sleep 0.5; done; exit 1"
        )

    def open(self) -> None:
        """Let the step through: listen on its port (the kernel completes its connection; nothing accepts)."""
        if self._server is None:
            self._server = socket.create_server((self.host, self.port))

    def close(self) -> None:
        """Stop listening (a step that has not connected yet waits again)."""
        if self._server is not None:
            self._server.close()
            self._server = None


@dataclass
class NodeStack:
    """Everything a user runs, on one real node."""

    node: NodeCluster
    redis: RedisServer | None  # None: the product's own (the Helm chart's) Redis
    gitea: Gitea
    receiver: Service | None  # None: the receivers run in the cluster (the Helm chart)
    reconciler: Service | None
    receiver_url: str
    metrics_url: str
    registration_token: str
    runner_image: str
    webhook_secret: str = SECRET
    namespaces: list[str] = field(default_factory=list)  # every one `namespace()` made, oldest first
    gates: list[Gate] = field(default_factory=list)  # every one `gate()` made, oldest first

    def gate(self) -> Gate:
        """A gate for a job step (`Gate.step`); the `cleared` fixture opens it, if the test did not, before
        it clears the test's namespaces."""
        made = Gate()
        self.gates.append(made)
        return made

    # -- Kubernetes -----------------------------------------------------------------------------

    def namespace(self, name: str, *, unique: bool = True, registration_token: str | None = None) -> str:
        """A new namespace (`name-xxxxx` when unique) holding the Secret with the registration and API tokens."""
        ns = f"{name}-{uuid.uuid4().hex[:5]}" if unique else name
        assert api_request(self.node, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
        self.namespaces.append(ns)
        self.set_tokens(ns, registration_token=registration_token or self.registration_token, create=True)
        return ns

    def set_tokens(self, ns: str, *, registration_token: str, create: bool = False) -> None:
        """Create or replace the namespace's Secret with the registration and API tokens."""
        data = {"registration-token": registration_token, "api-token": self.gitea.token}
        secret = {
            "metadata": {"name": TOKENS},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        }
        path = f"/api/v1/namespaces/{ns}/secrets"
        status, body = (
            api_request(self.node, "POST", path, secret)
            if create
            else api_request(self.node, "PUT", f"{path}/{TOKENS}", secret)
        )
        assert status in (200, 201), body

    def group(self, ns: str, label: str, *, name: str = "runners", **spec: Any) -> dict[str, Any]:
        """Apply a RunnerGroup for org jobs with `runs-on: label`, run in host mode by our runner image
        (a field given as None is left out: the CRD's default)."""
        body: dict[str, Any] = {
            "apiVersion": "gitea.bpg.pw/v1alpha1",
            "kind": "RunnerGroup",
            "metadata": {"name": name},
            "spec": {
                "scope": "org",
                "org": ORG,
                "gitea": {"url": self.gitea.url},
                "labels": [f"{label}:host"],
                "defaultLabels": [],
                "image": self.runner_image,
                "maxActiveRunners": 5,
                "registrationToken": {"secretRef": {"name": TOKENS, "key": "registration-token"}},
                "authToken": {"secretRef": {"name": TOKENS, "key": "api-token"}},
                **spec,
            },
        }
        body["spec"] = {k: v for k, v in body["spec"].items() if v is not None}
        path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups"
        status, created = api_request(self.node, "POST", path, body)
        assert status == 201, created
        return dict(created)

    def group_status(self, ns: str, name: str = "runners") -> dict[str, Any]:
        """The RunnerGroup's status."""
        _, body = api_request(self.node, "GET", f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/{name}")
        return dict(body.get("status") or {})

    def condition(self, ns: str, kind: str, name: str = "runners") -> dict[str, Any]:
        """The group's condition `kind` ({} while it has none)."""
        conds = {c["type"]: c for c in self.group_status(ns, name).get("conditions") or []}
        return dict(conds.get(kind) or {})

    def condition_false(self, ns: str, kind: str, *, timeout: float, name: str = "runners") -> dict[str, Any]:
        """Wait until the group's condition `kind` is False; return that condition."""
        return dict(
            wait_for(
                lambda: (c := self.condition(ns, kind, name)).get("status") == "False" and c,
                timeout=timeout,
                what=f"{kind} False",
            )
        )

    def runner_jobs(self, ns: str) -> list[dict[str, Any]]:
        """The runner Jobs in a namespace."""
        return list(api_request(self.node, "GET", f"/apis/batch/v1/namespaces/{ns}/jobs")[1]["items"])

    def active_runners(self, ns: str) -> list[str]:
        """The names of a namespace's runner Jobs that have not finished."""
        return [j["metadata"]["name"] for j in self.runner_jobs(ns) if not finished(j)]

    def clear(self, ns: str) -> None:
        """Delete a namespace and everything in it, its warm runners first the product's way (scaled to no
        idle runner, so that their rows in Gitea go too), and wait until no Pod of it is left."""
        path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups"
        try:
            for group in api_request(self.node, "GET", path)[1]["items"]:
                if group["spec"].get("minIdleRunners"):
                    patch = {"spec": {"minIdleRunners": 0}}
                    url = f"{path}/{group['metadata']['name']}"
                    api_request(self.node, "PATCH", url, patch, content_type="application/merge-patch+json")
            wait_for(
                lambda: not self.active_runners(ns),
                timeout=90,
                what=f"no runner left in {ns}",
                explain=lambda: self.describe_runners(ns),
            )
        finally:
            # What is left (a test that failed midway, a Pod of its own) goes without a grace period.
            api_request(self.node, "DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs?propagationPolicy=Background")
            api_request(self.node, "DELETE", f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
            api_request(self.node, "DELETE", f"/api/v1/namespaces/{ns}")
            # Nothing of it runs once its Pods are gone (and none comes back: the namespace is going). The
            # namespace itself goes in the background: the namespace controller takes some 10 s over
            # every kind of object in it, which the next test need not wait for.
            wait_for(
                lambda: (
                    (found := api_request(self.node, "GET", f"/api/v1/namespaces/{ns}/pods"))[0] == 404
                    or not found[1].get("items")
                ),
                timeout=120,
                what=f"no Pod left in namespace {ns}",
            )

    def describe_runners(self, ns: str) -> str:
        """Each runner Job of a namespace with its Pods' phases, and what the reconciler logged about
        runners: for the message of a failed wait."""
        pods: dict[str, list[str]] = {}
        for pod in self.pods(ns):
            owner = (pod["metadata"].get("labels") or {}).get("job-name", "?")
            status = pod["status"]
            conditions = [c for c in status.get("conditions") or [] if c["status"] == "False"]
            why = [f"{c['type']}: {c.get('message') or c.get('reason')}" for c in conditions]
            pods.setdefault(owner, []).append(f"{pod['metadata']['name']}={status.get('phase')} {why or ''}".strip())
        node = api_request(self.node, "GET", f"/api/v1/nodes/{NODE_NAME}")[1]
        taints = [t["key"] for t in (node.get("spec") or {}).get("taints") or []]
        lines = [f"node {NODE_NAME} taints {taints}"] if taints else []
        for job in self.runner_jobs(ns):
            meta, status = job["metadata"], job.get("status") or {}
            conds = [c["type"] for c in status.get("conditions") or [] if c["status"] == "True"]
            lines.append(
                f"job {meta['name']} created {meta['creationTimestamp']} {conds} pods {pods.get(meta['name'])}"
            )
        if self.reconciler is not None:
            lines += [ln for ln in self.our_log("reconciler").splitlines() if '"runner ' in ln or "poll healed" in ln]
        if self.receiver is not None:
            lines += [ln for ln in self.our_log("receiver").splitlines() if '"webhook recorded"' in ln]
        return "\n".join(lines)

    def pods(self, ns: str) -> list[dict[str, Any]]:
        """The Pods in a namespace."""
        return list(api_request(self.node, "GET", f"/api/v1/namespaces/{ns}/pods")[1]["items"])

    # -- Gitea ----------------------------------------------------------------------------------

    def repo(self, *, webhook: bool = True) -> str:
        """A new repository in the org; with a `workflow_job` webhook to our receiver unless told not to."""
        name = f"r{uuid.uuid4().hex[:6]}"
        self.gitea.api("POST", f"/orgs/{ORG}/repos", {"name": name, "auto_init": True, "default_branch": "main"})
        repo = f"{ORG}/{name}"
        if webhook:
            config = {"url": self.receiver_url, "content_type": "json", "secret": self.webhook_secret}
            hook = {"type": "gitea", "active": True, "events": ["workflow_job"], "config": config}
            self.gitea.api("POST", f"/repos/{repo}/hooks", hook)
        return repo

    def push(self, repo: str, text: str, *, path: str = ".gitea/workflows/ci.yml") -> int:
        """Commit a workflow; return the id of the run it starts."""
        before = {r["id"] for r in self.runs(repo)}
        self.gitea.push_file(repo, path, text, message=f"workflow {path}")
        return wait_for(
            lambda: next((int(r["id"]) for r in self.runs(repo) if r["id"] not in before), None),
            timeout=30,
            what="the pushed workflow's run",
            every=0.05,  # the benchmark dates the jobs' queueing from here
        )

    def runs(self, repo: str) -> list[dict[str, Any]]:
        """The repository's workflow runs."""
        return list(self.gitea.api("GET", f"/repos/{repo}/actions/runs?limit=50")["workflow_runs"] or [])

    def run(self, repo: str, run_id: int) -> dict[str, Any]:
        """One workflow run as Gitea reports it."""
        return dict(self.gitea.api("GET", f"/repos/{repo}/actions/runs/{run_id}"))

    def jobs(self, repo: str, run_id: int) -> list[dict[str, Any]]:
        """A run's jobs as Gitea reports them (status, conclusion, runner_id)."""
        return list(self.gitea.api("GET", f"/repos/{repo}/actions/runs/{run_id}/jobs?limit=50")["jobs"] or [])

    def wait_job_running(self, repo: str, run_id: int) -> None:
        """Until one of the run's jobs is in progress (a runner took it)."""
        wait_for(
            lambda: [j for j in self.jobs(repo, run_id) if j["status"] == "in_progress"],
            timeout=60,
            what=f"a job of run {run_id} running",
        )

    def job_log(self, repo: str, job_id: int) -> str:
        """A job's log as Gitea serves it."""
        return self.gitea.raw("GET", f"/repos/{repo}/actions/jobs/{job_id}/logs").decode(errors="replace")

    def only_log(self, repo: str, run_id: int) -> str:
        """The log of a run's one job (a run of more jobs fails here)."""
        (job,) = self.jobs(repo, run_id)
        return self.job_log(repo, job["id"])

    def wait_run(self, repo: str, run_id: int, *, timeout: float = 120) -> dict[str, Any]:
        """Until Gitea reports the run completed; return it."""
        return wait_for(
            lambda: (r := self.run(repo, run_id))["status"] == "completed" and r,
            timeout=timeout,
            what=f"run {run_id} of {repo} completed",
            every=0.5,
        )

    def gitea_runners(self) -> list[dict[str, Any]]:
        """The org's runners as Gitea lists them."""
        return list(self.gitea.api("GET", f"/orgs/{ORG}/actions/runners?limit=50")["runners"] or [])

    def runners_with(self, label: str) -> list[dict[str, Any]]:
        """The org's runners that carry a label, as Gitea lists them."""
        return [r for r in self.gitea_runners() if label in {lb["name"] for lb in r.get("labels") or []}]

    def deliveries(self) -> list[dict[str, Any]]:
        """What the receiver logged of each delivery it recorded (job_id, action, outcome, ...)."""
        assert self.receiver is not None, "the receivers run in the cluster: read their Pods' logs"
        return deliveries(self.receiver)

    def delivered_job_ids(self) -> set[int]:
        """The Gitea jobs the receiver recorded a webhook delivery for."""
        return {int(d["job_id"]) for d in self.deliveries()}

    def recorded(self, job_id: int, action: str) -> bool:
        """Whether the receiver applied a delivery of this job and action to Redis."""
        return any(
            d["job_id"] == job_id and d["action"] == action and d["outcome"] == "applied" for d in self.deliveries()
        )

    def metric(self, name: str, **labels: str) -> float:
        """The sum of a reconciler metric's samples that carry these labels (0 if none)."""
        with urllib.request.urlopen(self.metrics_url, timeout=5) as resp:
            text = resp.read().decode()
        return sum(
            sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
        )

    def reconfigured(self, **env: str) -> contextlib.AbstractContextManager[None]:
        """The reconciler restarted with some settings changed, and restarted as it was afterwards."""
        assert self.reconciler is not None
        return self.reconciler.reconfigured(port=urlsplit(self.metrics_url).port, **env)

    def our_log(self, which: Literal["receiver", "reconciler"]) -> str:
        """What our process on the host logged (in the Helm scenarios they run in Pods instead)."""
        service = self.receiver if which == "receiver" else self.reconciler
        assert service is not None, f"the {which} runs in the cluster: read its Pods' logs"
        return service.log()

    # -- lifecycle ------------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop our processes and Gitea (the node and Redis belong to whoever started them)."""
        for service in (self.reconciler, self.receiver):
            if service is not None:
                service.stop()
        self.gitea.stop()


def start_gitea(workdir: Path, *, tls: Pair | None = None, ca: Path | None = None) -> tuple[Gitea, str]:
    """Gitea on the node's address (as most users have it: outside the cluster), with the org and the
    org's runner registration token; over HTTPS with `tls`, a certificate `ca` signed."""
    gitea = Gitea(workdir / "gitea", host=NODE_IP, tls=tls, ca=ca)
    try:
        gitea.start()
        gitea.api("POST", "/orgs", {"username": ORG})
        token = gitea.api("POST", f"/orgs/{ORG}/actions/runners/registration-token")["token"]
    except BaseException:
        gitea.stop()
        raise
    return gitea, str(token)


def start_stack(workdir: Path, *, node: NodeCluster, redis: RedisServer, **reconciler_env: str) -> NodeStack:
    """Gitea on the node's address, an org with a registration token, and our two processes; if any of
    it fails to start, what did start is stopped again."""
    runner_image = image("runner")[0]
    apply_crd(node, crd())
    gitea, token = start_gitea(workdir)
    started: list[Service | Gitea] = [gitea]
    try:
        prefix = f"node{uuid.uuid4().hex[:6]}"
        env = {"GRS_REDIS_PREFIX": prefix, "GRS_POLL_INTERVAL": "3", "GRS_POLL_JITTER": "0", **reconciler_env}
        env.setdefault("GRS_GITEA_URL", gitea.url)  # the default instance: the Gitea its groups name
        receiver, port, reconciler, metrics = our_services(
            workdir, redis_url=redis.url, kubeconfig=node.kubeconfig, namespace="", secret=SECRET, **env
        )
        receiver.env["GRS_REDIS_PREFIX"] = prefix
        started += [receiver, reconciler]
        receiver.start(port=port)
        reconciler.start(port=metrics)
    except BaseException:
        for thing in reversed(started):
            thing.stop()
        raise
    return NodeStack(
        node=node,
        redis=redis,
        gitea=gitea,
        receiver=receiver,
        reconciler=reconciler,
        receiver_url=f"http://127.0.0.1:{port}/webhook",
        metrics_url=f"http://127.0.0.1:{metrics}/metrics",
        registration_token=token,
        runner_image=runner_image,
    )
