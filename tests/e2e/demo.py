"""The newcomer's demo: a sandbox with a real Gitea, Redis and Kubernetes API, and our two processes.

`bash tests/e2e/demo.sh` builds the peers (with progress), starts the sandbox, applies a RunnerGroup,
pushes a demo workflow, shows what happens live, and keeps the sandbox running with its URLs printed
until Ctrl-C. TEST HARNESS ONLY: nothing here is meant for production.

There is no kubelet and no act_runner in the sandbox (act_runner's Go module is not served to this
project's machines), so the runner Jobs get Pods that stay Pending and the jobs stay queued; in a
real cluster those Pods run act_runner, which takes the job.
"""

from __future__ import annotations

import base64
import json
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from reconciler.crd import crd
from tests.e2e.harness import ADMIN, PASSWORD, Gitea, Service, our_services
from tests.kube_cluster import KubeCluster, api_request, apply_crd
from tests.redis_server import RedisServer

NS = "demo"
SECRET = "demo-webhook-secret"
WORKFLOW = """name: demo
on: [push]
jobs:
  build:
    runs-on: demo-linux
    steps:
      - run: echo building
  test:
    runs-on: demo-linux
    steps:
      - run: echo testing
  deploy:
    runs-on: demo-linux
    needs: [build, test]
    steps:
      - run: echo deploying
"""


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="grs-demo-"))
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    redis = RedisServer(root)
    kube = KubeCluster(root / "kube", controller_manager=True)
    (root / "kube").mkdir()
    gitea = Gitea(root / "gitea")
    services: list[Service] = []
    try:
        say("starting redis-server, etcd, kube-apiserver, kube-controller-manager and Gitea")
        redis.start()
        kube.start()
        apply_crd(kube, crd())
        gitea.start()
        gitea.api("POST", "/orgs", {"username": "acme"})
        gitea.api("POST", "/orgs/acme/repos", {"name": "demo", "auto_init": True, "default_branch": "main"})
        token = gitea.api("POST", "/orgs/acme/actions/runners/registration-token")["token"]

        say("applying the RunnerGroup 'acme' (org acme, label demo-linux) in namespace demo")
        api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        data = {"registration-token": token, "api-token": gitea.token}
        api_request(
            kube,
            "POST",
            f"/api/v1/namespaces/{NS}/secrets",
            {
                "metadata": {"name": "gitea-runner-tokens"},
                "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
            },
        )
        group = {
            "apiVersion": "gitea.bpg.pw/v1alpha1",
            "kind": "RunnerGroup",
            "metadata": {"name": "acme"},
            "spec": {
                "scope": "org",
                "org": "acme",
                "gitea": {"url": gitea.url},
                "labels": ["demo-linux:host"],
                "defaultLabels": [],
                "maxActiveRunners": 5,
                "registrationToken": {"secretRef": {"name": "gitea-runner-tokens", "key": "registration-token"}},
                "authToken": {"secretRef": {"name": "gitea-runner-tokens", "key": "api-token"}},
            },
        }
        api_request(kube, "POST", f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{NS}/runnergroups", group)

        receiver, port, reconciler, metrics = our_services(
            root, redis_url=redis.url, kubeconfig=kube.kubeconfig, namespace=NS, secret=SECRET
        )
        services = [receiver, reconciler]
        receiver.start(port=port)
        reconciler.start(port=metrics)
        gitea.api(
            "POST",
            "/orgs/acme/hooks",
            {
                "type": "gitea",
                "active": True,
                "events": ["workflow_job"],
                "config": {"url": f"http://127.0.0.1:{port}/webhook", "content_type": "json", "secret": SECRET},
            },
        )

        say("pushing .gitea/workflows/demo.yml to acme/demo: build and test are queued, deploy waits for them")
        gitea.push_file("acme/demo", ".gitea/workflows/demo.yml", WORKFLOW, message="demo workflow")
        print(
            f"""
  Gitea         {gitea.url}/acme/demo/actions   (user {ADMIN}, password {PASSWORD})
  webhook       http://127.0.0.1:{port}/webhook   metrics http://127.0.0.1:{port}/metrics
  reconciler    http://127.0.0.1:{metrics}/metrics
  kubectl       KUBECONFIG={kube.kubeconfig} kubectl -n {NS} get rg,jobs,pods
  logs          {root}/*.log
  Stop with Ctrl-C.
""",
            flush=True,
        )
        follow(receiver, kube, gitea, lambda: stopping)
    finally:
        say("stopping the sandbox")
        for s in reversed(services):
            s.stop()
        gitea.stop()
        kube.stop()
        redis.stop()


def follow(receiver: Service, kube: KubeCluster, gitea: Gitea, stopped: Any) -> None:
    """Print each new thing that happens, until Ctrl-C."""
    seen: set[str] = set()
    while not stopped():
        for line in receiver.log().splitlines():
            if '"webhook recorded"' in line and line not in seen:
                seen.add(line)
                d = json.loads(line)
                say(f"webhook received: job {d['job_id']} {d['action']} ({d['outcome']})")
        _, jobs = api_request(kube, "GET", f"/apis/batch/v1/namespaces/{NS}/jobs")
        for job in jobs.get("items", []):
            key = "job/" + job["metadata"]["name"]
            if key not in seen:
                seen.add(key)
                gitea_job = job["metadata"].get("annotations", {}).get("gitea.bpg.pw/job-id", "warm")
                say(f"runner Job created: {job['metadata']['name']} for Gitea job {gitea_job}")
        _, pods = api_request(kube, "GET", f"/api/v1/namespaces/{NS}/pods")
        for pod in pods.get("items", []):
            key = f"pod/{pod['metadata']['name']}/{pod['status'].get('phase')}"
            if key not in seen:
                seen.add(key)
                say(
                    f"runner Pod {pod['metadata']['name']}: {pod['status'].get('phase')} "
                    "(no kubelet in this sandbox: a cluster would start act_runner here)"
                )
        _, rg = api_request(kube, "GET", f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{NS}/runnergroups/acme")
        status = rg.get("status") or {}
        key = f"rg/{status.get('activeRunners')}/{status.get('queuedJobs')}"
        if status and key not in seen:
            seen.add(key)
            say(f"RunnerGroup acme: {status.get('queuedJobs')} queued, {status.get('activeRunners')} active runners")
        time.sleep(0.5)


if __name__ == "__main__":
    main()
