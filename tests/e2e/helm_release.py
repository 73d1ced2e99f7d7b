"""The release as users get it, published on the test node: the image, Redis's and the chart in a registry
at the node's address (NODE_REGISTRY_PORT, which the node's containerd pulls from over plain HTTP),
under the chart's default names, the chart pushed by deploy/release.sh. TEST HARNESS ONLY."""

from __future__ import annotations

import os
import subprocess
import tomllib
from pathlib import Path

import yaml

from tests.e2e.harness import Gitea
from tests.e2e.node_stack import NodeStack
from tests.kube_cluster import peer
from tests.node.cluster import NODE_IP, NodeCluster, image
from tests.node.configs import NODE_REGISTRY_PORT
from tests.node.registry import Registry

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gitea-runner-scaler"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def helm_home(home: Path) -> dict[str, str]:
    """Helm's cache, configuration and data under `home`: nothing of the machine's own."""
    return {f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}


def published(work: Path, helm_env: dict[str, str]) -> tuple[Registry, list[str]]:
    """The release in a registry on the node: the image and Redis's under the chart's default names, and
    the chart pushed by deploy/release.sh. Returns the registry (running) and the chart's reference."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    registry = Registry(work / "release-registry", host=NODE_IP, port=NODE_REGISTRY_PORT)
    registry.start()
    try:
        registry.push(image("scaler")[1], values["image"]["repository"], VERSION)
        registry.push(image("redis")[1], values["redis"]["image"]["repository"], values["redis"]["image"]["tag"])
        env = {**os.environ, **helm_env, "HELM": str(peer("helm")), "DIST": str(work / "dist")}
        args = ["bash", str(ROOT / "deploy" / "release.sh"), "chart", registry.address, "--plain-http"]
        pushed = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
        assert pushed.returncode == 0, pushed.stderr
    except BaseException:
        registry.stop()
        raise
    owner = values["image"]["repository"].split("/")[0]
    return registry, [
        f"oci://{registry.address}/{owner}/charts/gitea-runner-scaler",
        "--version",
        VERSION,
        "--plain-http",
    ]


def chart_stack(node: NodeCluster, gitea: Gitea, token: str, *, receiver_url: str = "") -> NodeStack:
    """The test stack of a chart's install: its receivers and reconciler run in the cluster, Redis too."""
    return NodeStack(
        node=node,
        redis=None,
        gitea=gitea,
        receiver=None,
        reconciler=None,
        receiver_url=receiver_url,
        metrics_url="",
        registration_token=token,
        runner_image=image("runner")[0],
    )
