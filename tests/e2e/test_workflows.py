"""Workflows as users write them, on a real node: Docker jobs through `containerMode: dind`, and
`uses:` actions resolved by Gitea.

The runner Pods get the product's Docker daemon sidecar (the `docker` test image, a stand-in for
docker:dind) told about the test registry through the group's `dindArgs`; the job and service
images are pulled from that registry by each runner's own daemon, as users' runners pull theirs.
`actions/checkout@v4` comes from the test Gitea itself (tests/e2e/actions.py). Each test asserts
Gitea's conclusions and what the job's steps printed in their logs.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
import secrets
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from tests.e2e import actions
from tests.e2e.docker_mode import Images, docker_spec, privileged, serving_images
from tests.e2e.node_stack import NodeStack, start_gitea, wait_for, workflow
from tests.e2e.watch import RunnerWatch
from tests.kube_cluster import api_request, api_text, peer, runner_of
from tests.node.cluster import NODE_IP, NodeCluster, image, running_node
from tests.node.pki import Authority

pytestmark = [pytest.mark.node, pytest.mark.usefixtures("cleared")]

CHART = Path(__file__).resolve().parents[2] / "deploy" / "helm" / "gitea-runner-scaler"
FULL = "grs-gitea-runner-scaler"  # the chart's names for release "grs"
# The upstream act_runner image shapes (tests/images/upstream): release series -> its runner binary.
UPSTREAM = {"upstream0": "act_runner", "upstream1": "gitea-runner"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    """The node, with the Docker daemon's image and the upstream runner images in its store as well,
    and the default runner image's stand-in under its own name."""
    names = ("pause", "runner", "docker", "rootless", *UPSTREAM)
    with running_node(tmp_path_factory.mktemp("node"), images=names) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def images(node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Images]:
    """The registry on the node's address, holding the job image and Redis."""
    with serving_images(tmp_path_factory.mktemp("registry")) as served:
        yield served


@pytest.fixture(scope="module")
def published(stack: NodeStack, tmp_path_factory: pytest.TempPathFactory) -> None:
    """actions/checkout and actions/cache in the test Gitea."""
    actions.publish(stack.gitea, tmp_path_factory.mktemp("actions"), ("checkout", "cache"))


@pytest.fixture(scope="module")
def cache_server(stack: NodeStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The chart's cache server (its Deployment and Service as `helm template` renders them, with an
    emptyDir) on the runner image (act_runner 1.x), in a namespace of its own with the Secret the
    chart's hook would make; the reconciler settings the chart would give."""
    ns, secret = stack.namespace("cache"), secrets.token_urlsafe(24)
    repository, _, tag = image("runner")[0].rpartition(":")
    sets = ("cache.enabled=true", "cache.persistence.enabled=false", "cache.image.registry=",
            f"cache.image.repository={repository}", f"cache.image.tag={tag}")  # fmt: skip
    args = [str(peer("helm")), "template", "grs", str(CHART), "-n", ns, "--show-only", "templates/cache.yaml"]
    rendered = subprocess.run([*args, *(a for s in sets for a in ("--set", s))], capture_output=True, text=True)
    assert rendered.returncode == 0, rendered.stderr
    data = {"cache-secret": base64.b64encode(secret.encode()).decode()}
    body = {"metadata": {"name": f"{FULL}-cache"}, "data": data}
    assert api_request(stack.node, "POST", f"/api/v1/namespaces/{ns}/secrets", body)[0] == 201
    for doc in yaml.safe_load_all(rendered.stdout):
        where = "/apis/apps/v1" if doc["kind"] == "Deployment" else "/api/v1"
        assert api_request(stack.node, "POST", f"{where}/namespaces/{ns}/{doc['kind'].lower()}s", doc)[0] == 201

    def ready() -> bool:
        pods = stack.pods(ns)
        return bool(pods) and all(c.get("ready") for p in pods for c in p["status"].get("containerStatuses") or [{}])

    wait_for(ready, timeout=60, what="the cache server ready")
    path = tmp_path_factory.mktemp("cache") / "secret"
    path.write_text(secret)
    yield {
        "GRS_RUNNER_CACHE_URL": f"http://{FULL}-cache.{ns}.svc.cluster.local:8088/",
        "GRS_RUNNER_CACHE_SECRET_FILE": str(path),
        "GRS_RUNNER_CACHE_SECRET_NAME": f"{FULL}-runner-cache",
    }
    api_request(stack.node, "DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/{FULL}-cache")
    wait_for(lambda: not stack.pods(ns), timeout=60, what="the cache server gone")


def docker_group(stack: NodeStack, images: Images, *, name: str) -> tuple[str, str, RunnerWatch]:
    """A privileged namespace with a `containerMode: dind` group, and a watch on its runners (started
    before the group, stopped by the caller): (namespace, label, watch)."""
    ns, label = stack.namespace(name), f"l{uuid.uuid4().hex[:6]}"
    privileged(stack, ns)
    watch = RunnerWatch(stack.node, ns)
    stack.group(ns, label, **docker_spec(images, label))
    return ns, label, watch


DOCKER_JOBS = """\
name: docker
on: [push]
jobs:
  checkout:
    runs-on: {label}
    steps:
      - uses: actions/checkout@v4
      - run: echo "checked out $(head -n1 README.md) at $(git rev-parse HEAD)"
  services:
    runs-on: {label}
    services:
      cache:
        image: {redis}
    steps:
      - run: |
          for i in $(seq 100); do exec 3<>/dev/tcp/cache/6379 && break; sleep 0.2; done
          printf 'PING\\r\\n' >&3
          read -r answer <&3
          echo "the service answered ${{answer%$'\\r'}}"
  build:
    runs-on: {label}
    steps:
      - run: |
          mkdir context
          printf 'FROM {job}\\nRUN echo built in a step > /built.txt\\n' > context/Dockerfile
          docker build -q -t grs-built context
          docker run --rm --entrypoint cat grs-built /built.txt
          docker run --rm -v /var/run/docker.sock:/var/run/docker.sock --entrypoint docker grs-built \\
            version --format 'the daemon answered through /var/run/docker.sock: {{{{.Server.Version}}}}'
"""


def test_container_services_and_docker_build_jobs_go_green_in_docker_mode(
    stack: NodeStack, images: Images, published: None
) -> None:
    ns, label, watch = docker_group(stack, images, name="docker")
    try:
        repo = stack.repo()  # its first commit has a README.md starting "# <name>"
        # The service's image is named as on Docker Hub: the daemon pulls it through its mirror.
        hub_redis = images.redis.split("/", 1)[1]
        run_id = stack.push(repo, DOCKER_JOBS.format(label=label, redis=hub_redis, job=images.job))
        first = wait_for(lambda: stack.runner_jobs(ns), timeout=30, what="a runner Job")[0]
        run = stack.wait_run(repo, run_id, timeout=300)
        wait_for(lambda: not watch.alive, timeout=60, what="every runner finished")
    finally:
        watch.stop()

    jobs = {j["name"]: j for j in stack.jobs(repo, run_id)}
    logs = {name: stack.job_log(repo, j["id"]) for name, j in jobs.items()}
    assert run["conclusion"] == "success", {n: (j["conclusion"], logs[n][-1500:]) for n, j in jobs.items()}
    assert {n: j["conclusion"] for n, j in jobs.items()} == dict.fromkeys(("build", "checkout", "services"), "success")
    commit = stack.gitea.api("GET", f"/repos/{repo}/commits?limit=1")[0]["sha"]
    assert f"checked out # {repo.split('/')[1]} at {commit}" in logs["checkout"], logs["checkout"][-2000:]
    assert "the service answered +PONG" in logs["services"], logs["services"][-2000:]
    assert f"docker pull image={hub_redis}" in logs["services"], logs["services"][-3000:]
    assert "built in a step" in logs["build"], logs["build"][-2000:]
    assert "the daemon answered through /var/run/docker.sock: 20.10" in logs["build"], logs["build"][-2000:]
    # Each job ran in the job image its runner's daemon pulled from the registry, on a runner of its own.
    for name, log in logs.items():
        assert f"docker pull image={images.job}" in log, (name, log[:3000])
    assert sorted(watch.for_job.values()) == sorted(j["id"] for j in jobs.values()) and len(watch.seen) == 3
    pod = first["spec"]["template"]["spec"]
    (daemon,) = [c for c in pod["initContainers"] if c["name"] == "dind"]
    assert f"--insecure-registry={images.registry}" in daemon["args"], daemon["args"]
    assert f"--registry-mirror=http://{images.registry}" in daemon["args"], daemon["args"]
    assert "securityContext" not in pod["containers"][0], "the runner itself is not privileged"


CACHED = """\
name: cache
on: [push]
jobs:
  cached:
    runs-on: {label}
    steps:
      - id: deps
        uses: actions/cache@v4
        with:
          path: deps
          key: deps-v1
      - if: steps.deps.outputs.cache-hit != 'true'
        run: mkdir -p deps && echo "made in run ${{{{ github.run_number }}}}" > deps/made.txt
      - run: echo "the cache holds $(cat deps/made.txt)"
"""


def test_actions_cache_restores_on_a_later_runner_what_an_earlier_one_saved_and_only_in_its_repository(
    stack: NodeStack, images: Images, published: None, cache_server: dict[str, str]
) -> None:
    """Ephemeral runners share the chart's cache server: run 1 misses and saves, run 2 (another runner)
    restores it. act_runner 1.x's server keeps repositories apart: another repository's run misses."""
    with stack.reconfigured(**cache_server):
        ns, label, watch = docker_group(stack, images, name="cached")
        try:
            repo, other = stack.repo(), stack.repo()
            first = stack.push(repo, CACHED.format(label=label))
            assert stack.wait_run(repo, first, timeout=300)["conclusion"] == "success", _logs(stack, repo, first)
            second = stack.push(repo, CACHED.format(label=label) + "# again\n")
            elsewhere = stack.push(other, CACHED.format(label=label))
            runs = {(repo, second): None, (other, elsewhere): None}
            for r, run_id in runs:
                assert stack.wait_run(r, run_id, timeout=300)["conclusion"] == "success", _logs(stack, r, run_id)
            wait_for(lambda: not watch.alive, timeout=60, what="every runner finished")
        finally:
            watch.stop()
    one, two, three = _logs(stack, repo, first), _logs(stack, repo, second), _logs(stack, other, elsewhere)
    assert "Cache not found for input keys: deps-v1" in one and "Cache saved with key: deps-v1" in one, one[-3000:]
    assert "Cache restored from key: deps-v1" in two, two[-3000:]
    made = stack.run(repo, first)["run_number"]
    assert f"the cache holds made in run {made}" in two and f"made in run {made}" in one, two[-3000:]
    assert "Cache not found for input keys: deps-v1" in three, "another repository's entries are not ours"
    assert len(watch.seen) == 3, "each run on a runner of its own"
    secret = api_request(stack.node, "GET", f"/api/v1/namespaces/{ns}/secrets/{FULL}-runner-cache")
    assert secret[0] == 200, "the reconciler keeps the shared secret beside the runners"


def _logs(stack: NodeStack, repo: str, run_id: int) -> str:
    return "\n".join(stack.job_log(repo, j["id"]) for j in stack.jobs(repo, run_id))


ROOTLESS_JOB = """\
name: rootless
on: [push]
jobs:
  default:
    runs-on: {label}
    steps:
      - run: |
          echo "the job runs as uid $(id -u) in its container"
          docker info --format 'the daemon: {{{{.ServerVersion}}}} {{{{.SecurityOptions}}}}'
          docker run --rm --entrypoint sh {job} -c 'echo a container of the job daemon ran'
"""


def test_the_default_runner_image_runs_docker_jobs_on_its_own_rootless_daemon(stack: NodeStack, images: Images) -> None:
    """A group that names no image gets act_runner's dind-rootless image (here its stand-in, under the
    same name): the runner container, privileged as that image needs, runs a rootless Docker daemon
    as uid 1000, its data on the emptyDir the controller adds; a docker:// job pulls its image from the
    registry, runs in it, and starts a container of its own."""
    ns, label = stack.namespace("default"), f"l{uuid.uuid4().hex[:6]}"
    privileged(stack, ns)
    stack.group(ns, label, image=None, labels=[f"{label}:docker://{images.job}"])
    repo = stack.repo()
    run_id = stack.push(repo, ROOTLESS_JOB.format(label=label, job=images.job))

    run = stack.wait_run(repo, run_id, timeout=300)

    log = stack.only_log(repo, run_id)
    assert run["conclusion"] == "success", log[-3000:]
    assert f"docker pull image={images.job}" in log, log[-3000:]
    assert "the job runs as uid 0 in its container" in log and "name=rootless" in log, log[-3000:]
    assert "a container of the job daemon ran" in log, log[-3000:]
    # One runner Job; a runner that ended before it took any job is replaced by the controller, as it
    # should be (seen once in CI: the stand-in's rootless daemon did not come up, and its act_runner never
    # called Gitea), so every runner Job there is is held to the spec.
    runner_jobs = stack.runner_jobs(ns)
    assert runner_jobs and image("rootless")[0] == "docker.io/gitea/act_runner:0.2.13-dind-rootless"
    for runner_job in runner_jobs:
        pod = runner_job["spec"]["template"]["spec"]
        assert pod["containers"][0]["image"] == image("rootless")[0]
        assert pod["containers"][0]["securityContext"] == {"privileged": True}
        mount = {"name": "dind-rootless-data", "mountPath": "/home/rootless/.local/share"}
        assert mount in pod["containers"][0]["volumeMounts"]
    wait_for(lambda: not stack.runners_with(label), timeout=30, what="Gitea lists no runner of the group")


@pytest.mark.parametrize("shape", list(UPSTREAM))
def test_the_upstream_runner_image_of_each_release_serves_a_job(stack: NodeStack, shape: str) -> None:
    """act_runner 0.x and 1.x images as their own Dockerfiles make them (their entrypoint, their
    binary's name): the prepare step finds the binary, and the image's entrypoint runs the daemon."""
    binary, ns, label = UPSTREAM[shape], stack.namespace("upstream"), f"l{uuid.uuid4().hex[:6]}"
    stack.group(ns, label, image=image(shape)[0])
    repo = stack.repo()
    step = 'echo "the runner binary is $(command -v act_runner gitea-runner)"'
    run_id = stack.push(repo, workflow("hello", label=label, step=step))

    run = stack.wait_run(repo, run_id, timeout=180)

    log = stack.only_log(repo, run_id)
    assert run["conclusion"] == "success", log[-2000:]
    assert f"the runner binary is /usr/local/bin/{binary}" in log, log[-2000:]
    (runner_job,) = stack.runner_jobs(ns)
    (pod,) = stack.pods(ns)
    prepared = api_text(stack.node, f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/log?container=prepare")
    assert f"runner {runner_of(runner_job)} registered by the controller" in prepared, prepared
    wait_for(lambda: not stack.runners_with(label), timeout=30, what="Gitea lists no runner of the group")


def test_an_image_with_no_runner_binary_fails_with_a_clear_condition(stack: NodeStack) -> None:
    ns, label = stack.namespace("nobinary"), f"l{uuid.uuid4().hex[:6]}"
    stack.group(ns, label, image=image("docker")[0])  # Docker and a shell, but no act_runner
    repo = stack.repo()
    run_id = stack.push(repo, workflow("stuck", label=label))

    condition = stack.condition_false(ns, "RunnersHealthy", timeout=60)
    assert condition["reason"] == "RegistrationFailed", condition
    assert "the image has neither act_runner nor gitea-runner on its PATH" in condition["message"], condition
    assert [j["status"] for j in stack.jobs(repo, run_id)] == ["queued"], "the Gitea job waits for a working runner"


COMPOSITE = """\
name: hello
description: a composite action, cloned by the runner from the test Gitea
runs:
  using: composite
  steps:
    - run: echo "hello from an action cloned over https"
      shell: bash
"""


def test_a_gitea_served_over_https_by_its_own_ca_is_polled_registered_with_and_cloned_from(
    stack: NodeStack, tmp_path: Path
) -> None:
    """One setting (`GRS_GITEA_CA_FILE`) and every client trusts Gitea's CA: the reconciler's polls
    (the repository has no webhook), the runner's registration and fetches, and its `uses:` clone."""
    pki = Authority(tmp_path / "pki")
    gitea, token = start_gitea(tmp_path, tls=pki.issue("gitea", cn="gitea", ips=(NODE_IP,)), ca=pki.ca.cert)
    try:
        action = tmp_path / "hello"
        action.mkdir()
        (action / "action.yml").write_text(COMPOSITE)
        gitea.api("POST", "/orgs", {"username": actions.OWNER})
        actions.push_tree(gitea, action, f"{actions.OWNER}/hello", tags=("v1",), ca=pki.ca.cert)
        https = dataclasses.replace(stack, gitea=gitea, registration_token=token)  # the same node and processes
        # A second Gitea: named, so its job ids have keys of their own (the admin names every instance).
        with stack.reconfigured(GRS_GITEA_CA_FILE=str(pki.ca.cert), GRS_GITEA_INSTANCES=f"tls={gitea.url}"):
            ns, label = https.namespace("https"), f"l{uuid.uuid4().hex[:6]}"
            https.group(ns, label)
            repo = https.repo(webhook=False)
            text = workflow("tls", label=label).replace("      - run:", "      - uses: actions/hello@v1\n      - run:")
            run_id = https.push(repo, text)
            run = https.wait_run(repo, run_id, timeout=180)
            log = https.only_log(repo, run_id)
            assert run["conclusion"] == "success", log[-3000:]
            assert "hello from an action cloned over https" in log, log[-3000:]
            assert gitea.url.startswith("https://") and https.group_status(ns)["target"] == "acme"
            # The group goes while its Gitea still answers: its runners' rows are vetted there.
            path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/runners"
            assert api_request(stack.node, "DELETE", path)[0] == 200
            wait_for(lambda: api_request(stack.node, "GET", path)[0] == 404, timeout=60, what="the group gone")
            assert not https.runners_with(label), "no runner of it left in Gitea"
    finally:
        gitea.stop()


LINGER = """\
name: linger
on: [push]
jobs:
  linger:
    runs-on: {label}
    steps:
      - run: |
          docker run --rm --entrypoint bash {job} -c 'echo a Docker job ran; {gate}'
"""


def _files_holding(needle: bytes, roots: list[Path], *, skip: tuple[str, ...] = ()) -> list[Path]:
    """The regular files under the folders `roots` (up to 64 MB each; paths containing a
    `skip` part left out) that hold `needle`."""
    found = []
    for root in roots:
        for path in root.rglob("*"):
            with contextlib.suppress(OSError):
                small = path.is_file() and not path.is_symlink() and path.stat().st_size <= 64 << 20
                if small and not set(path.parts) & set(skip) and needle in path.read_bytes():
                    found.append(path)
    return found


def test_nothing_on_the_node_holds_the_registration_token_while_a_docker_runner_runs(
    stack: NodeStack, images: Images
) -> None:
    """The controller registers each runner, so no Pod names the registration token: while a Docker-mode
    runner (privileged daemon sidecar) runs a job, neither the container runtime's records and bundles
    (where the kubelet puts every container's resolved env) nor the Pod volumes on the node hold it. The
    runner's own credential is there (the search finds what it looks for), and nothing else."""
    ns, label, watch = docker_group(stack, images, name="nothing")
    watch.stop()
    repo, gate = stack.repo(), stack.gate()  # the job's container runs until the search is done
    run_id = stack.push(repo, LINGER.format(label=label, job=images.job, gate=gate.step))
    stack.wait_job_running(repo, run_id)
    (runner_job,) = stack.runner_jobs(ns)
    credential = api_request(stack.node, "GET", f"/api/v1/namespaces/{ns}/secrets/{runner_of(runner_job)}")[1]
    own = json.loads(base64.b64decode(credential["data"][".runner"]))["token"].encode()
    node = stack.node.layout.root
    # The runtime's bundles (each container's config.json) and its records (the bolt database).
    runtime = [node / "containerd" / "state", node / "containerd" / "root" / "io.containerd.metadata.v1.bolt"]
    pods = [node / "kubelet" / "pods" / runner_job_pod_uid(stack, ns)]

    holding_token = _files_holding(stack.registration_token.encode(), [*runtime, *pods], skip=("dind-storage",))
    holding_own = _files_holding(own, pods, skip=("dind-storage",))
    holding_name = _files_holding(runner_of(runner_job).encode(), runtime)
    gate.open()

    assert stack.wait_run(repo, run_id, timeout=180)["conclusion"] == "success"
    assert not holding_token, holding_token
    # The runner's own credential: in its Secret's volume and the copy in its state folder, nowhere else.
    assert {p.name for p in holding_own} == {".runner"} and len(holding_own) >= 2, holding_own
    assert holding_name, "the runtime's records hold the containers' env (GITEA_RUNNER_NAME): a token there would show"


def runner_job_pod_uid(stack: NodeStack, ns: str) -> str:
    (pod,) = stack.pods(ns)
    return str(pod["metadata"]["uid"])


def test_the_webhook_the_controller_installs_delivers_and_a_job_goes_green_by_it_alone(stack: NodeStack) -> None:
    """webhook.manage with the real Gitea: the controller installs the repository's `workflow_job` webhook
    (the poll off, so only its deliveries tell of the job), Gitea delivers, the receiver accepts what that
    webhook's own secret signed, and the job goes green; the webhook goes with the group."""
    key = secrets.token_hex(16)
    repo, ns, label = stack.repo(webhook=False), stack.namespace("hooked"), f"hooked-{uuid.uuid4().hex[:6]}"
    manage = {"GRS_WEBHOOK_MANAGE": "true", "GRS_WEBHOOK_URL": stack.receiver_url, "GRS_WEBHOOK_KEY": key}
    receiver = stack.receiver
    assert receiver is not None
    with (
        receiver.reconfigured(port=urlsplit(stack.receiver_url).port, GRS_WEBHOOK_KEY=key),
        stack.reconfigured(GRS_POLL_ENABLED="false", **manage),
    ):
        stack.group(ns, label, scope="repo", org=None, repo=repo, registrationToken=None)  # one token
        wait_for(
            lambda: stack.condition(ns, "WebhookInstalled").get("status") == "True",
            timeout=60,
            what="WebhookInstalled True",
            explain=lambda: str(stack.condition(ns, "WebhookInstalled")),
        )
        hooks = stack.gitea.api("GET", f"/repos/{repo}/hooks")
        assert [(h["config"]["url"], h["events"], h["active"]) for h in hooks] == [
            (stack.receiver_url, ["workflow_job"], True)
        ]
        run_id = stack.push(repo, workflow("a", label=label))
        run = stack.wait_run(repo, run_id)
        assert run["conclusion"] == "success", stack.jobs(repo, run_id)
        assert {j["id"] for j in stack.jobs(repo, run_id)} <= stack.delivered_job_ids(), "the webhook told of it"
        owner, name = repo.split("/")
        (pod,) = stack.pods(ns)  # the runner's Pod says which job it was started for (cost attribution)
        told = {"gitea.bpg.pw/owner": owner, "gitea.bpg.pw/repository": name, "gitea.bpg.pw/attempt": "1"}
        assert told.items() <= pod["metadata"]["labels"].items(), pod["metadata"]["labels"]
        path = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups/runners"
        assert api_request(stack.node, "DELETE", path)[0] == 200
        wait_for(lambda: not stack.gitea.api("GET", f"/repos/{repo}/hooks"), timeout=60, what="the webhook deleted")
    assert key not in stack.our_log("reconciler") + stack.our_log("receiver")
