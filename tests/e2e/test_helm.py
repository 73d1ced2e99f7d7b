"""The Helm chart as a platform engineer installs it, on a real node, with Gitea outside the cluster.

Installed as the README's quick start has a stranger install it, its commands read from the README
(tests/readme.py) and run with bash from the repository's root: `deploy/release.sh --registry` builds
and pushes the image, copies Redis's and the cache's, and pushes the chart, into a registry on the node
(with a stand-in for Docker: tests/e2e/docker_standin.py); then the namespace, the one token's Secret,
`helm install oci://...` from that registry (with a NodePort besides, since Gitea is not in the
cluster), and the RunnerGroup. The kubelet pulls every image of the chart from there. The hook Job
creates the Secrets, every Pod becomes Ready under the chart's own ServiceAccounts and RBAC in a
namespace that warns on anything the `restricted` Pod Security profile forbids, Redis keeps its data on
a PersistentVolume. The README's step 5 workflow goes green. Gitea delivers its webhooks to the
receivers through the Service, and workflows go green on runners the installed reconciler starts. Then a
rotated webhook secret rolls the receivers while both secrets are accepted, `helm uninstall` keeps the
CRD, the RunnerGroups, the Secrets and Redis's volume, and a second install takes them over.

Each test runs its workflows on a RunnerGroup and label of its own, and leaves the release as it found
it (the rotation upgrades back, the uninstall installs again with the same values): the order they run
in does not matter.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.kube.manifests import GROUP_LABEL, JOB_ID_ANNOTATION, RUNNER_ANNOTATION
from tests import readme
from tests.e2e import actions
from tests.e2e.helm_release import CHART, ROOT, VERSION, chart_stack, helm_home
from tests.e2e.node_stack import ORG, NodeStack, start_gitea, wait_for, workflow
from tests.e2e.watch import PodTimeline
from tests.kube_cluster import api_request, api_text, peer
from tests.node.cluster import NODE_IP, NodeCluster, image, running_node
from tests.node.configs import NODE_REGISTRY_PORT
from tests.node.registry import Registry

pytestmark = pytest.mark.node  # a node of its own: one node at a time on a machine (the CI lane of `-m node`)
QUICKSTART = ROOT / "deploy" / "quickstart"
RELEASE = "runners"  # the README's
NS = "ci"
FULL = f"{RELEASE}-gitea-runner-scaler"
COMPONENTS = ["reconciler", "redis", "webhook", "webhook"]


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    """A node of its own, with the default runner image's stand-in under its own name; the chart's own
    images (ours and Redis's) it pulls from the release's registry."""
    names = ("pause", "runner", "rootless")
    with running_node(tmp_path_factory.mktemp("helm-node"), images=names) as cluster:
        yield cluster


@dataclass
class Release:
    """The installed chart and what the tests learn about it."""

    node: NodeCluster
    home: Path
    stack: NodeStack
    chart: list[str]  # the chart's reference and the flags that go with it
    installs: list[subprocess.CompletedProcess[str]] = field(default_factory=list)

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.node.kubeconfig),
            **helm_home(self.home),
        }
        done = subprocess.run([str(peer("helm")), *args], env=env, capture_output=True, text=True, check=False)
        if check:
            assert done.returncode == 0, f"helm {' '.join(args[:2])}: {done.stdout}{done.stderr}{self.diagnosis()}"
        return done

    def diagnosis(self) -> str:
        """What a user would look at when an install fails: the Pods' states and logs, the Events."""
        out = []
        for pod in self.get(f"/api/v1/namespaces/{NS}/pods")["items"]:
            name = pod["metadata"]["name"]
            out.append(f"\n--- pod {name}: {json.dumps(pod['status'].get('containerStatuses'))[:1500]}")
            try:
                out.append(api_text(self.node, f"/api/v1/namespaces/{NS}/pods/{name}/log")[-2000:])
            except OSError as exc:
                out.append(f"(no log: {exc})")
        for event in self.get(f"/api/v1/namespaces/{NS}/events")["items"][-30:]:
            out.append(f"\nevent {event['involvedObject']['name']}: {event['reason']}: {event['message']}")
        return "".join(out)

    def install(self, *, values: Path) -> subprocess.CompletedProcess[str]:
        """`helm install` with the values of an earlier install (`values()`)."""
        return self.adopt(self.helm("install", RELEASE, *self.chart, "-n", NS, "-f", str(values), "--wait",
                                    "--timeout", "5m"))  # fmt: skip

    def adopt(self, done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
        """An install done: kept, and Gitea pointed at the webhook Service's node port, which a new install
        may change."""
        self.installs.append(done)
        service = self.get(f"/api/v1/namespaces/{NS}/services/{FULL}-webhook")
        self.stack.receiver_url = f"http://{NODE_IP}:{service['spec']['ports'][0]['nodePort']}/webhook"
        return done

    def values(self) -> Path:
        """The values the release has now (`helm get values`), in a file of their own."""
        self.home.mkdir(parents=True, exist_ok=True)
        path = self.home / f"values-{uuid.uuid4().hex[:6]}.yaml"
        path.write_text(self.helm("get", "values", RELEASE, "-n", NS, "-o", "yaml").stdout)
        return path

    def settled(self) -> list[dict[str, Any]]:
        """The chart's Pods once each component's are Ready and none is on its way out (after a roll)."""
        return wait_for(
            lambda: _components(pods := self.chart_pods()) == COMPONENTS and all(_ready(p) for p in pods) and pods,
            timeout=120,
            what="the chart's Pods settled",
            explain=self.diagnosis,
        )

    def get(self, path: str) -> dict[str, Any]:
        status, body = api_request(self.node, "GET", path)
        assert status == 200, (path, body)
        return dict(body)

    def chart_pods(self) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={RELEASE}"
        return list(self.get(f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}")["items"])

    def secret(self, name: str, key: str) -> str:
        return base64.b64decode(self.get(f"/api/v1/namespaces/{NS}/secrets/{name}")["data"][key]).decode()

    def deliveries_applied(self) -> float:
        """workflow_job deliveries the receivers applied, summed over their Pods' /metrics (once no Pod is on
        its way out: its address may already lead nowhere)."""
        total = 0.0
        for pod in self.settled():
            if pod["metadata"]["labels"]["app.kubernetes.io/component"] != "webhook":
                continue
            with urllib.request.urlopen(f"http://{pod['status']['podIP']}:8080/metrics", timeout=10) as resp:
                text = resp.read().decode()
            for line in text.splitlines():
                if line.startswith('grs_webhook_deliveries_total{event="workflow_job",outcome="applied"}'):
                    total += float(line.rsplit(" ", 1)[1])
        return total


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions") or [])


def _components(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["labels"]["app.kubernetes.io/component"] for p in pods)


@pytest.fixture(scope="module")
def release(node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Release]:
    """The README's quick start, steps 0 to 4 (`quick_started`), with Gitea outside the cluster and
    storage for Redis's claim."""
    work = tmp_path_factory.mktemp("helm")
    # What a cluster's storage gives a claim: here a volume on the node, owned by Redis's uid.
    data = work / "redis-data"
    data.mkdir()
    os.chown(data, 999, 999)
    volume = {
        "metadata": {"name": "redis-data"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(data), "type": "Directory"},
        },
    }
    assert api_request(node, "POST", "/api/v1/persistentvolumes", volume)[0] == 201
    home = work / "helm-home"
    registry = Registry(work / "release-registry", host=NODE_IP, port=NODE_REGISTRY_PORT)
    registry.start()
    try:
        gitea, token = start_gitea(work)
    except BaseException:
        registry.stop()
        raise
    try:
        stack = chart_stack(node, gitea, token)  # the receivers' URL is known once the Service has its node port
        owner = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"].split("/")[0]
        chart = [f"oci://{registry.address}/{owner}/charts/gitea-runner-scaler", "--version", VERSION, "--plain-http"]
        rel = Release(node=node, home=home, stack=stack, chart=chart)
        rel.adopt(quick_started(rel, work, registry.address))
        stack.webhook_secret = rel.secret(f"{FULL}-webhook", "webhook-secret")
        stack.set_tokens(NS, registration_token=token, create=True)
        yield rel
    finally:
        gitea.stop()
        registry.stop()


def quick_started(release: Release, work: Path, registry: str) -> subprocess.CompletedProcess[str]:
    """Run the README's quick start commands in turn, as written, with the reader's values (this Gitea, its
    org, the org owner's token, the registry on the node) and `--plain-http`, as the README says for an
    HTTP registry. Beyond the README: the namespace also warns of anything of the chart's own that the
    `restricted` Pod Security profile forbids (runner Pods of the default image are privileged, which the
    namespace allows), and `helm install` sets a NodePort for Gitea outside the cluster and waits. Returns
    what `helm install` printed."""
    bin_dir = work / "bin"
    bin_dir.mkdir()
    standin = bin_dir / "docker"
    standin.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.e2e.docker_standin "$@"\n')
    standin.chmod(0o755)
    (bin_dir / "helm").symlink_to(peer("helm"))
    gitea = release.stack.gitea
    env = {
        **os.environ,
        **helm_home(release.home),
        "REGISTRY": registry,
        "GITEA_URL": gitea.url,
        "GITEA_ORG": ORG,
        "GITEA_API_TOKEN": gitea.token,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "KUBECONFIG": str(release.node.kubeconfig),
        "DOCKER_STANDIN_STATE": str(work / "docker-standin.json"),
        "DIST": str(work / "dist"),
    }
    commands = readme.quick_start()[0]
    installed = None
    for written in commands:
        n, command = readme.step(written), readme.plain_http(written)
        if n == 3:
            command += " --set webhook.service.type=NodePort --wait --timeout 5m"
        done = subprocess.run(["bash", "-c", command], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, f"step {n}: {command}\n{done.stdout}\n{done.stderr}{release.diagnosis()}"
        if n == 1:
            labels = {"metadata": {"labels": {"pod-security.kubernetes.io/warn": "restricted"}}}
            merge = "application/merge-patch+json"
            status, body = api_request(release.node, "PATCH", f"/api/v1/namespaces/{NS}", labels, content_type=merge)
            assert status == 200, body
        installed = done if n == 3 else installed
    assert installed is not None and len(commands) == 5, commands
    return installed


@pytest.fixture
def label(release: Release) -> Iterator[str]:
    """A RunnerGroup of the test's own (named as its label) in the release's namespace: its label."""
    name = f"h{uuid.uuid4().hex[:6]}"
    release.stack.group(NS, name, name=name)
    yield name
    api_request(release.node, "DELETE", f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{NS}/runnergroups/{name}")


@pytest.fixture
def rotated(release: Release) -> Iterator[str]:
    """The name of a Secret for the test to rotate the webhook secret with; afterwards the release is back
    on the values it had, Gitea on the secret it had, and the Secret is gone."""
    values, secret = release.values(), release.stack.webhook_secret
    yield "webhook-rotated"
    release.helm(
        "upgrade", RELEASE, *release.chart, "-n", NS, "--reset-values", "-f", str(values), "--wait", "--timeout", "5m"
    )
    release.stack.webhook_secret = secret
    api_request(release.node, "DELETE", f"/api/v1/namespaces/{NS}/secrets/webhook-rotated")
    release.settled()


def test_install_makes_every_pod_ready_under_the_charts_own_accounts(release: Release) -> None:
    pods = release.settled()  # every component's Pods Ready, after --wait (and after any roll before)
    accounts = {
        p["metadata"]["labels"]["app.kubernetes.io/component"]: p["spec"].get("serviceAccountName") for p in pods
    }
    assert accounts["reconciler"] == f"{FULL}-reconciler" and accounts["webhook"] == f"{FULL}-webhook"
    # Nothing of the chart's own would be refused under the `restricted` profile (the API server warns).
    assert "PodSecurity" not in release.installs[0].stderr, release.installs[0].stderr
    # The hook made the Secrets and went away; the render carried no value.
    assert len(release.secret(f"{FULL}-webhook", "webhook-secret")) == 48
    assert len(release.secret(f"{FULL}-redis", "redis-password")) == 48
    assert not release.get(f"/apis/batch/v1/namespaces/{NS}/jobs?labelSelector=app.kubernetes.io/component=secrets")[
        "items"
    ]
    claim = release.get(f"/api/v1/namespaces/{NS}/persistentvolumeclaims/data-{FULL}-redis-0")
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"] == "redis-data"


def test_gitea_delivers_through_the_service_and_a_workflow_goes_green(release: Release, label: str) -> None:
    stack = release.stack
    repo = stack.repo()
    applied = release.deliveries_applied()  # the receivers' counters hold the tests' before too
    run_id = stack.push(repo, workflow("build", "test", label=label))
    assert stack.wait_run(repo, run_id, timeout=180)["conclusion"] == "success"
    jobs = stack.jobs(repo, run_id)
    # The receivers in the cluster applied Gitea's deliveries (their own metrics say so, Pod by Pod).
    # At least `queued` and `completed` of each job; Gitea sends them a second or so after the fact.
    wait_for(lambda: release.deliveries_applied() - applied >= 2 * len(jobs), timeout=30, what="the deliveries applied")
    # The installed reconciler started exactly one runner per job, and Gitea keeps none of them.
    runner_jobs = release.get(f"/apis/batch/v1/namespaces/{NS}/jobs?labelSelector={GROUP_LABEL}={label}")["items"]
    assert len(runner_jobs) == len(jobs), [j["metadata"]["name"] for j in runner_jobs]
    wait_for(lambda: not stack.runners_with(label), timeout=60, what="Gitea lists no runner of the group")


def _sign(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _deliver(url: str, secret: str) -> int | None:
    """A signed delivery the receiver answers without writing anything (an event it ignores)."""
    body = b"{}"
    headers = {"Content-Type": "application/json", "X-Gitea-Event": "push", "X-Gitea-Signature": _sign(secret, body)}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers), timeout=5) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
    except OSError:
        return None  # a connection to a Pod that is going away; the next one goes elsewhere


def _answer(url: str, secret: str) -> int:
    """The receivers' answer to a delivery, once one answers (a Pod on its way out may not)."""
    return wait_for(lambda: _deliver(url, secret), timeout=30, what="an answer from the receivers")


def test_a_rotated_webhook_secret_rolls_the_receivers_accepting_both(
    release: Release, label: str, rotated: str
) -> None:
    stack = release.stack
    old, new = stack.webhook_secret, "rotated-" + os.urandom(12).hex()
    before = {p["metadata"]["name"] for p in release.settled() if "webhook" in p["metadata"]["name"]}
    both = {"metadata": {"name": rotated}, "stringData": {"webhook-secret": f"{new}\n{old}\n"}}
    assert api_request(release.node, "POST", f"/api/v1/namespaces/{NS}/secrets", both)[0] == 201
    answers: dict[str, list[tuple[float, int | None]]] = {"old": [], "new": []}  # (when, the answer)
    done = threading.Event()

    def keep_delivering() -> None:
        while not done.is_set():
            for which, secret in (("old", old), ("new", new)):
                answers[which].append((time.monotonic(), _deliver(stack.receiver_url, secret)))
            time.sleep(0.05)  # the pace of the deliveries (the load, not a wait for an event)

    def old_answered(since: float, until: float = float("inf")) -> list[int | None]:
        return [a for t, a in list(answers["old"]) if since < t < until]

    with PodTimeline(release.node, NS) as timeline:
        sender = threading.Thread(target=keep_delivering)
        sender.start()
        try:
            wait_for(lambda: old_answered(0).count(200) >= 3, timeout=30, what="deliveries before the roll")
            release.helm("upgrade", RELEASE, *release.chart, "-n", NS, "--reuse-values",
                         "--set", f"webhook.secret.existingSecret={rotated}", "--wait", "--timeout", "5m")  # fmt: skip
            after = {p["metadata"]["name"] for p in release.settled() if "webhook" in p["metadata"]["name"]}
            began, ended = timeline.roll(before, after)
            wait_for(lambda: old_answered(ended).count(200) >= 3, timeout=30, what="deliveries after the roll")
        finally:
            done.set()
            sender.join()
    assert not before & after, "the receivers were not replaced"
    # The sender ran through the roll: Gitea's secret was taken before it began (before the first new
    # receiver came and the first old one went), while the receivers were replaced, and after the last new
    # one was Ready and the last old one went; never refused (an answer was a 2xx, or none at all from a Pod
    # on its way out). The new one is taken by every receiver once the roll is done.
    assert {a for _, a in answers["old"] if a is not None} == {200}, answers["old"]
    phases = {"before": old_answered(0, began), "during": old_answered(began, ended), "after": old_answered(ended)}
    assert all(p.count(200) >= 3 for p in phases.values()), {k: len(v) for k, v in phases.items()}
    assert [_answer(stack.receiver_url, new) for _ in range(6)] == [200] * 6
    # Gitea moves to the new secret; its deliveries still reach and runs still go green.
    stack.webhook_secret = new
    repo = stack.repo()
    run_id = stack.push(repo, workflow("after-rotation", label=label))
    assert stack.wait_run(repo, run_id, timeout=180)["conclusion"] == "success"
    # The old secret is dropped from the Secret; the next upgrade rolls the receivers, which refuse it.
    only_new = {"metadata": {"name": rotated}, "stringData": {"webhook-secret": new}}
    assert api_request(release.node, "PUT", f"/api/v1/namespaces/{NS}/secrets/{rotated}", only_new)[0] == 200
    release.helm("upgrade", RELEASE, *release.chart, "-n", NS, "--reuse-values", "--wait", "--timeout", "5m")
    assert [_answer(stack.receiver_url, old) for _ in range(6)] == [401] * 6
    assert _answer(stack.receiver_url, new) == 200


def test_uninstall_keeps_what_users_own_and_a_second_install_takes_it_over(release: Release, label: str) -> None:
    claim_path = f"/api/v1/namespaces/{NS}/persistentvolumeclaims/data-{FULL}-redis-0"
    claim_uid = release.get(claim_path)["metadata"]["uid"]
    generated = release.secret(f"{FULL}-webhook", "webhook-secret")
    values = release.values()
    release.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "3m")
    wait_for(lambda: not release.chart_pods(), timeout=120, what="the chart's Pods are gone")
    # Kept: the CRD, the RunnerGroup, the generated Secrets, Redis's claim (and so its data).
    assert release.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/runnergroups.gitea.bpg.pw")
    assert release.get(f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{NS}/runnergroups/{label}")
    assert release.secret(f"{FULL}-webhook", "webhook-secret") == generated
    assert release.get(claim_path)["metadata"]["uid"] == claim_uid
    # A second install, with the values of the first, adopts all of it.
    release.install(values=values)
    assert all(_ready(p) for p in release.chart_pods())
    assert release.get(claim_path)["metadata"]["uid"] == claim_uid
    assert release.secret(f"{FULL}-webhook", "webhook-secret") == generated  # the hook replaced nothing
    stack = release.stack
    repo = stack.repo()
    run_id = stack.push(repo, workflow("reinstalled", label=label))
    assert stack.wait_run(repo, run_id, timeout=180)["conclusion"] == "success"
    status = stack.group_status(NS, label)
    assert status.get("observedGeneration") == 1


@pytest.fixture
def quick_start(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """What the README's step 5 needs beyond its group (made by step 4, `quick_started`): the actions it
    uses, served by Gitea, and the images act_runner's default labels name, which come from the node:
    `docker.gitea.com` resolves to the node's address (tests/node/configs.py), where a registry serves
    `runner-images:ubuntu-latest` on port 80, the job image standing in for it. Yields the group's name;
    afterwards the registry is gone."""
    work, stack = tmp_path_factory.mktemp("quick-start"), release.stack
    actions.publish(stack.gitea, work / "actions", ("checkout",))
    registry = Registry(work / "registry", host=NODE_IP, port=80)
    registry.start()
    try:
        registry.push(image("docker")[1], "runner-images", "ubuntu-latest")
        yield yaml.safe_load((QUICKSTART / "runnergroup.yaml").read_text())["metadata"]["name"]
    finally:
        registry.stop()


def _runner_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if GROUP_LABEL in p["metadata"]["labels"]]


def test_the_quick_start_as_written_runs_a_default_labelled_job_on_the_default_image(
    release: Release, quick_start: str
) -> None:
    """The README's step 5: `deploy/quickstart/hello.yaml` pushed as it is, its `runs-on: ubuntu-latest`
    served by the group of step 4 (deploy/quickstart/runnergroup.yaml, nothing changed but its placeholders):
    the runner Pod of the default image (privileged, allowed by the namespace's label) runs the job in
    act_runner's default job image, pulled by the runner's own rootless Docker daemon; checkout works
    in it, the run goes green, and Gitea keeps no runner of the group afterwards. As the quick start
    has it, polling only: the repository has no webhook, the reconciler's poll of Gitea finds the job."""
    stack = release.stack
    repo = stack.repo(webhook=False)
    run_id = stack.push(repo, (QUICKSTART / "hello.yaml").read_text(), path=".gitea/workflows/hello.yaml")

    run = stack.wait_run(repo, run_id, timeout=300)

    log = stack.only_log(repo, run_id)
    assert run["conclusion"] == "success", log[-3000:]
    assert "docker pull image=docker.gitea.com/runner-images:ubuntu-latest" in log, log[-3000:]
    assert "hello from a runner Job made for this job, in Linux" in log, log[-3000:]
    # One runner Job ran the job: the one whose runner Gitea names. The group may have made another for it
    # only if that one never took it (seen once: a first rootless runner that never came online in Gitea,
    # replaced once a later poll still listed the job queued).
    (gitea_job,) = stack.jobs(repo, run_id)
    selector = f"{GROUP_LABEL}={quick_start}"
    runner_jobs = release.get(f"/apis/batch/v1/namespaces/{NS}/jobs?labelSelector={selector}")["items"]
    assert {j["metadata"]["annotations"][JOB_ID_ANNOTATION] for j in runner_jobs} == {str(gitea_job["id"])}
    took = [j for j in runner_jobs if j["metadata"]["annotations"][RUNNER_ANNOTATION] == gitea_job["runner_name"]]
    assert len(took) == 1, [(j["metadata"]["annotations"], j["status"]) for j in runner_jobs]
    pod = took[0]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "docker.io/gitea/act_runner:0.2.13-dind-rootless"
    wait_for(lambda: not stack.runners_with("linux"), timeout=60, what="Gitea lists no runner of the group")
