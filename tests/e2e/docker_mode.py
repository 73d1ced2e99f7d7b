"""Docker-mode runners on the test node: the registry their daemons pull from, and the group spec.

`serving_images` starts the registry (tests/node/registry.py) on the node's address with the job
image (the `docker` test image, a stand-in for node:20-bookworm with the docker CLI) and Redis (for
`services:`) pushed into it; `docker_spec` is a RunnerGroup spec whose runners get the product's
Docker daemon sidecar, told about that registry through `dindArgs`, and whose label runs jobs in the
job image. The tests (test_workflows.py) and the node benchmark share them. TEST HARNESS ONLY.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e.node_stack import NodeStack
from tests.kube_cluster import api_request
from tests.node.cluster import NODE_IP, image
from tests.node.registry import Registry


@dataclass(frozen=True)
class Images:
    """The Docker daemon's image (in the node's store), and the job and service images as the
    registry serves them."""

    daemon: str
    job: str
    redis: str
    registry: str


@contextlib.contextmanager
def serving_images(workdir: Path) -> Iterator[Images]:
    """The registry on the node's address, holding the job image and Redis; stopped afterwards."""
    registry = Registry(workdir, host=NODE_IP)
    registry.start()
    try:
        daemon, docker_tar = image("docker")
        redis_ref, redis_tar = image("redis")
        job = registry.push(docker_tar, "grs/docker", daemon.rsplit(":", 1)[1])
        redis = registry.push(redis_tar, "grs/redis", redis_ref.rsplit(":", 1)[1])
        yield Images(daemon=daemon, job=job, redis=redis, registry=registry.address)
    finally:
        registry.stop()


def privileged(stack: NodeStack, ns: str) -> None:
    """Label a namespace for privileged Pods, as the README's quick start does for Docker modes."""
    patch = {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}
    path = f"/api/v1/namespaces/{ns}"
    assert api_request(stack.node, "PATCH", path, patch, content_type="application/merge-patch+json")[0] == 200


def docker_spec(images: Images, label: str) -> dict[str, Any]:
    """RunnerGroup spec fields: `containerMode: dind` (its daemon told about the registry, and using
    it as its Docker Hub mirror), and `label` running jobs in the job image."""
    return {
        "labels": [f"{label}:docker://{images.job}"],
        "containerMode": "dind",
        "dindImage": images.daemon,
        # The registry as a mirror of Docker Hub too: an image named as on Docker Hub comes from there.
        "dindArgs": [f"--insecure-registry={images.registry}", f"--registry-mirror=http://{images.registry}"],
    }
