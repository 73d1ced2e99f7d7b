"""The newcomer's demo: the sandbox (a real node, Gitea, Redis, our two processes), a workflow pushed to
it, and what happens live until Gitea shows it green; then the sandbox stays up until Ctrl-C.

`bash tests/e2e/demo.sh` runs it (as root: the node changes the host; everything is undone on exit).
TEST HARNESS ONLY: nothing here is meant for production.
"""

from __future__ import annotations

import json
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from tests.e2e.node_stack import NodeStack
from tests.e2e.sandbox import NAMESPACE, Sandbox

WORKFLOW = """name: demo
on: [push]
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - run: echo building on $HOSTNAME
  test:
    runs-on: ubuntu-latest
    steps:
      - run: echo testing on $HOSTNAME
  deploy:
    runs-on: ubuntu-latest
    needs: [build, test]
    steps:
      - run: echo deploying on $HOSTNAME
"""


def say(text: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {text}", flush=True)


def main() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    sandbox = Sandbox(Path(tempfile.mkdtemp(prefix="grs-demo-")))
    try:
        say("starting the sandbox: Redis, a one-node Kubernetes cluster, Gitea, webhook-scaler, reconciler")
        info = sandbox.up()
        stack = sandbox.stack
        assert stack is not None
        say(f"RunnerGroup 'ubuntu' in namespace {NAMESPACE} serves runs-on: ubuntu-latest (host mode)")
        say(f"pushing .gitea/workflows/demo.yml to {info['repo']}: build and test run at once, deploy after them")
        run_id = stack.push(info["repo"], WORKFLOW, path=".gitea/workflows/demo.yml")
        conclusion = follow(stack, info["repo"], run_id, stop)
        print(
            f"""
  The run concluded: {conclusion}
  Gitea         {info["gitea_url"]}/{info["repo"]}/actions
                (user {info["gitea_user"]}, password {info["gitea_password"]})
  kubectl       KUBECONFIG={info["kubeconfig"]} kubectl -n {NAMESPACE} get rg,jobs,pods
  sandbox.json  {json.dumps(info)}
  Push more workflows with runs-on: ubuntu-latest to {info["repo"]}. Stop with Ctrl-C.
""",
            flush=True,
        )
        stop.wait()
    finally:
        say("stopping the sandbox and undoing its changes to this machine")
        left = sandbox.down()
        say(f"left on this machine: {left or 'nothing'}")


def follow(stack: NodeStack, repo: str, run_id: int, stop: threading.Event) -> str:
    """Print each new thing that happens until the run completes (or Ctrl-C); return its conclusion."""
    seen: set[str] = set()

    def once(key: str, text: str) -> None:
        if key not in seen:
            seen.add(key)
            say(text)

    while not stop.is_set():
        for job in stack.jobs(repo, run_id):
            once(f"gitea/{job['id']}/{job['status']}", f"Gitea job {job['name']}: {job['status']}")
        for job in stack.runner_jobs(NAMESPACE):
            meta = job["metadata"]
            for_job = meta.get("annotations", {}).get("gitea.bpg.pw/job-id", "a warm runner")
            once(f"job/{meta['name']}", f"runner Job {meta['name']} created for Gitea job {for_job}")
        for pod in stack.pods(NAMESPACE):
            name, phase = pod["metadata"]["name"], pod["status"].get("phase")
            once(f"pod/{name}/{phase}", f"runner Pod {name}: {phase}")
        group = _group(stack)
        once(f"rg/{group.get('activeRunners')}/{group.get('queuedJobs')}", _describe(group))
        run = stack.run(repo, run_id)
        if run["status"] == "completed":
            return str(run["conclusion"])
        time.sleep(0.3)
    return "not finished (interrupted)"


def _group(stack: NodeStack) -> dict[str, Any]:
    return stack.group_status(NAMESPACE, "ubuntu")


def _describe(status: dict[str, Any]) -> str:
    return f"RunnerGroup ubuntu: {status.get('queuedJobs', 0)} queued, {status.get('activeRunners', 0)} active runners"


if __name__ == "__main__":
    main()
