"""`helm upgrade` from the previous release to this one, on a real node, while a job runs.

The previous release is the chart and the image of the commit in tests/images/previous-release (the
chart from git, the image built from that commit's files by tests/images/build.sh), installed as a
user installed it then, its image in the node's registry. A job starts on one of its runners and is
held on a gate (a TCP port on the node the test opens only at the end). Then `helm upgrade` to this
release, published as users get it (`oci://`, the registry's address and `gitea.url` set): the CRD is brought up
to date by the chart's hook (this version's status field is served and written), the new reconciler
takes over, the busy runner keeps running (same Job, same Pod, never restarted), the job succeeds once
the gate opens, and no second runner was ever started for it. The "never"s are read from a watch over
the namespace's Jobs and Pods for the whole run, not from the objects left at its end.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reconciler.kube.manifests import GROUP_LABEL, JOB_ID_ANNOTATION
from tests.e2e.helm_release import ROOT, VERSION, chart_stack, helm_home, published
from tests.e2e.node_stack import NodeStack, start_gitea, wait_for
from tests.e2e.watch import RunnerWatch
from tests.kube_cluster import api_request, peer
from tests.node.cluster import NODE_IP, NodeCluster, image, running_node
from tests.redis_server import free_port

pytestmark = pytest.mark.node  # a node of its own: one node at a time on a machine (the CI lane of `-m node`)
RELEASE, NS = "grs", "up"
FULL = f"{RELEASE}-gitea-runner-scaler"
PREVIOUS = (ROOT / "tests" / "images" / "previous-release").read_text().strip()
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/runnergroups.gitea.bpg.pw"


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    """A node of its own: the chart's images (both releases', Redis's) it pulls from the registry."""
    with running_node(tmp_path_factory.mktemp("upgrade-node"), images=("pause", "runner")) as cluster:
        yield cluster


class Helm:
    """helm against the node, with a home of its own."""

    def __init__(self, node: NodeCluster, home: Path) -> None:
        self.env = {**os.environ, "KUBECONFIG": str(node.kubeconfig), **helm_home(home)}

    def __call__(self, *args: str) -> str:
        done = subprocess.run([str(peer("helm")), *args], env=self.env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"helm {' '.join(args[:2])}: {done.stdout}{done.stderr}"
        return done.stdout + done.stderr


def _previous_chart(work: Path) -> Path:
    """The previous release's chart, from git."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", PREVIOUS, "deploy/helm/gitea-runner-scaler"],
        capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(work)], input=archive, check=True)
    return work / "deploy" / "helm" / "gitea-runner-scaler"


def _get(node: NodeCluster, path: str) -> dict[str, Any]:
    status, body = api_request(node, "GET", path)
    assert status == 200, (path, body)
    return dict(body)


def _gate() -> tuple[int, str]:
    """A port on the node nobody listens on yet, and a step that waits until somebody does (15 min)."""
    port = free_port()
    step = f"for i in $(seq 900); do (exec 3<>/dev/tcp/{NODE_IP}/{port}) 2>/dev/null && exit 0; sleep 1; done; exit 1"
    return port, step


def _open(port: int) -> socket.socket:
    """Let the gated step through: listen on its port (and accept whatever comes)."""
    server = socket.create_server((NODE_IP, port))

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=accept, daemon=True).start()
    return server


def test_an_upgrade_keeps_the_busy_runner_and_serves_the_new_crd(
    node: NodeCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    work = tmp_path_factory.mktemp("upgrade")
    helm = Helm(node, work / "helm-home")
    registry, chart = published(work, helm_home(work / "helm-home"))
    gitea, token = start_gitea(work)
    gate: socket.socket | None = None
    watch: RunnerWatch | None = None
    try:
        registry.push(image("previous")[1], "bpg-pw/gitea-runner-scaler", "previous")
        assert api_request(node, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})[0] == 201
        watch = RunnerWatch(node, NS)  # every runner Job and Pod of the run, from before the first install
        # The previous release, as its README had users install it (its values: full image references).
        helm("install", RELEASE, str(_previous_chart(work)), "-n", NS, "--wait", "--timeout", "5m",
             "--set", f"image.repository={registry.address}/bpg-pw/gitea-runner-scaler", "--set", "image.tag=previous",
             "--set", f"redis.image.repository={registry.address}/library/redis",
             "--set", "redis.persistence.enabled=false", "--set", "webhook.service.type=NodePort")  # fmt: skip
        assert "waitingJobs" not in json.dumps(_get(node, CRD))  # the previous release's CRD
        service = _get(node, f"/api/v1/namespaces/{NS}/services/{FULL}-webhook")
        secret = _get(node, f"/api/v1/namespaces/{NS}/secrets/{FULL}-webhook")["data"]["webhook-secret"]
        receiver = f"http://{NODE_IP}:{service['spec']['ports'][0]['nodePort']}/webhook"
        stack = chart_stack(node, gitea, token, receiver_url=receiver)
        stack.webhook_secret = base64.b64decode(secret).decode()
        stack.set_tokens(NS, registration_token=token, create=True)
        stack.group(NS, "long", name="long")
        port, step = _gate()
        repo = stack.repo()
        run_id = stack.push(
            repo, f"name: ci\non: [push]\njobs:\n  long:\n    runs-on: long\n    steps:\n      - run: {step}\n"
        )
        stack.wait_job_running(repo, run_id)
        (runner_job,) = _runner_jobs(stack)
        (runner_pod,) = [p for p in stack.pods(NS) if GROUP_LABEL in p["metadata"]["labels"]]

        # This release, as users get it: from the registry, with its address set and the Gitea the install
        # serves (gitea.url, which the previous release did not ask for: docs/operations.md#upgrading).
        helm("upgrade", RELEASE, *chart, "-n", NS, "--reset-values", "--wait", "--timeout", "5m",
             "--set", f"global.imageRegistry={registry.address}", "--set", "redis.persistence.enabled=false",
             "--set", "webhook.service.type=NodePort", "--set", f"gitea.url={gitea.url}")  # fmt: skip

        # The CRD is this version's, and the new reconciler (now the only one) writes its new field.
        assert "waitingJobs" in json.dumps(_get(node, CRD)["spec"]["versions"][0]["schema"])
        wait_for(
            lambda: (
                {p["spec"]["containers"][0]["image"] for p in stack.pods(NS) if _component(p) == "reconciler"}
                == {f"{registry.address}/bpg-pw/gitea-runner-scaler:{VERSION}"}
            ),
            timeout=120,
            what="only the new reconciler runs",
        )
        wait_for(lambda: "waitingJobs" in stack.group_status(NS, "long"), timeout=60, what="status.waitingJobs")
        # The busy runner was never touched: the same Job and Pod, running, its container never restarted.
        (still,) = [p for p in stack.pods(NS) if GROUP_LABEL in p["metadata"]["labels"]]
        assert still["metadata"]["uid"] == runner_pod["metadata"]["uid"] and still["status"]["phase"] == "Running"
        assert all(c["restartCount"] == 0 for c in still["status"]["containerStatuses"])
        assert [j["metadata"]["uid"] for j in _runner_jobs(stack)] == [runner_job["metadata"]["uid"]]
        assert [j["status"] for j in stack.jobs(repo, run_id)] == ["in_progress"]

        gate = _open(port)
        run = stack.wait_run(repo, run_id, timeout=180)
        assert run["conclusion"] == "success", stack.only_log(repo, run_id)[-2000:]
        # One runner for the job, before and after the upgrade.
        ids = [j["metadata"]["annotations"].get(JOB_ID_ANNOTATION) for j in _runner_jobs(stack)]
        assert ids == [runner_job["metadata"]["annotations"][JOB_ID_ANNOTATION]], ids
        wait_for(lambda: not stack.runners_with("long"), timeout=60, what="Gitea lists no runner of the group")
        _never_touched(watch, runner_job, runner_pod)
    finally:
        if watch is not None:
            watch.stop()
        if gate is not None:
            gate.close()
        gitea.stop()
        registry.stop()


def _never_touched(watch: RunnerWatch, runner_job: dict[str, Any], runner_pod: dict[str, Any]) -> None:
    """Over the whole run: one runner Job ever (no second runner for the job, however short-lived), never
    deleted while it ran, one Pod for it (never replaced), whose containers never restarted."""
    name, pod = runner_job["metadata"]["name"], runner_pod["metadata"]["uid"]
    assert watch.of_groups() == {runner_job["metadata"]["uid"]: name}, f"runner Jobs seen: {watch.of_groups()}"
    assert name not in watch.deleted_alive, "the busy runner's Job was deleted while it ran"
    assert watch.pods_of[name] == {pod}, f"the busy runner's Pods seen: {watch.pods_of[name]}"
    assert watch.restarts[pod] == 0, f"the busy runner's containers restarted {watch.restarts[pod]} times"
    assert watch.gaps == 0, "the watch saw every change"


def _component(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["labels"].get("app.kubernetes.io/component", ""))


def _runner_jobs(stack: NodeStack) -> list[dict[str, Any]]:
    return [j for j in stack.runner_jobs(NS) if GROUP_LABEL in j["metadata"]["labels"]]
