"""The sandbox: the whole product on a real node, up until told to stop.

`tests/e2e/sandbox.sh up DIR` runs `python -m tests.e2e.sandbox serve DIR` in the background. That
supervisor starts Redis, the one-node cluster, Gitea with an org, a repository and an org webhook,
our two processes and a RunnerGroup serving `ubuntu-latest:host`; then it writes DIR/sandbox.json
and waits. SIGTERM (what `sandbox.sh down DIR` sends) tears everything down with the same code the
tests use, and undoes every change to the host. TEST HARNESS ONLY.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from tests.e2e.harness import ADMIN, PASSWORD
from tests.e2e.node_stack import ORG, SECRET, NodeStack, start_stack
from tests.node.cluster import NodeCluster
from tests.redis_server import RedisServer

NAMESPACE = "sandbox"
LABEL = "ubuntu-latest"
REPO = "demo"


class Sandbox:
    """Redis, the node, Gitea and our processes in one folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.redis = RedisServer(root / "redis")
        self.node = NodeCluster(root / "node")
        self.stack: NodeStack | None = None

    def up(self) -> dict[str, Any]:
        """Start everything and return what sandbox.json says."""
        (self.root / "redis").mkdir(parents=True, exist_ok=True)
        self.redis.start()
        self.node.start()
        self.stack = stack = start_stack(self.root, node=self.node, redis=self.redis)
        gitea = stack.gitea
        gitea.api("POST", f"/orgs/{ORG}/repos", {"name": REPO, "auto_init": True, "default_branch": "main"})
        config = {"url": stack.receiver_url, "content_type": "json", "secret": SECRET}
        hook = {"type": "gitea", "active": True, "events": ["workflow_job"], "config": config}
        gitea.api("POST", f"/orgs/{ORG}/hooks", hook)
        stack.namespace(NAMESPACE, unique=False)
        stack.group(NAMESPACE, LABEL, name="ubuntu", maxActiveRunners=10)
        return {
            "gitea_url": gitea.url,
            "gitea_token": gitea.token,
            "gitea_user": ADMIN,
            "gitea_password": PASSWORD,
            "owner": ORG,
            "repo": f"{ORG}/{REPO}",
            "kubeconfig": str(self.node.kubeconfig),
            "namespace": NAMESPACE,
            "runnergroup": "ubuntu",
            "runner_labels": [f"{LABEL}:host"],
            "redis_url": self.redis.url,
            "webhook_url": stack.receiver_url,
            "reconciler_metrics_url": stack.metrics_url,
            "logs": str(self.root),
        }

    def down(self) -> list[str]:
        """Stop everything, newest first; return what was left on the host (nothing, normally)."""
        if self.stack is not None:
            self.stack.stop()
        self.node.stop()
        self.redis.stop()
        return self.node.changes.leftovers()


def serve(root: Path) -> int:
    """Bring the sandbox up, write sandbox.json, and hold it until SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    sandbox = Sandbox(root)
    try:
        info = sandbox.up()
        tmp = root / "sandbox.json.tmp"
        tmp.write_text(json.dumps(info, indent=2) + "\n")
        tmp.rename(root / "sandbox.json")
        print(f"[sandbox] up: {root / 'sandbox.json'}", flush=True)
        stop.wait()
    finally:
        print("[sandbox] stopping", flush=True)
        (root / "sandbox.json").unlink(missing_ok=True)
        left = sandbox.down()
        print(f"[sandbox] down; left on the host: {left or 'nothing'}", flush=True)
    return 1 if left else 0


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "serve":
        sys.exit("usage: python -m tests.e2e.sandbox serve DIR")
    folder = Path(sys.argv[2]).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sandbox.pid").write_text(str(os.getpid()))
    sys.exit(serve(folder))
