"""Fixtures for end-to-end tests on a real node: the node itself and the product installed on it.

Both are module-scoped: a module's node is stopped before the next module's starts (a machine has room
for one node at a time: its address, bridge and iptables chains are fixed), and nothing of them runs on
while other modules' tests run. CI runs the modules marked `node` in a lane of their own, beside the
other tests (.ci/run).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.node_stack import NodeStack, start_stack
from tests.node.cluster import NodeCluster, running_node
from tests.redis_server import RedisServer


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeCluster]:
    """A real one-node cluster (kubelet, containerd, CNI, kube-proxy, CoreDNS), torn down without leftovers."""
    with running_node(tmp_path_factory.mktemp("node")) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def stack(node: NodeCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeStack]:
    """Gitea, a Redis of its own and our two processes serving RunnerGroups on the node."""
    redis = RedisServer(tmp_path_factory.mktemp("node-redis"))
    redis.start()
    try:
        # A short runner backoff, finish and idle grace, and ghost sweep interval, so that the wrong-token,
        # cancel, surplus and ghost scenarios take seconds.
        started = start_stack(
            tmp_path_factory.mktemp("stack"),
            node=node,
            redis=redis,
            GRS_RUNNER_BACKOFF_INITIAL="3",
            GRS_FINISH_GRACE="5",
            GRS_IDLE_GRACE="10",
            GRS_GHOST_SWEEP_INTERVAL="10",
        )
        try:
            yield started
        finally:
            started.stop()
    finally:
        redis.stop()


@pytest.fixture
def cleared(stack: NodeStack) -> Iterator[None]:
    """The namespaces a test makes are gone after it, runners and all: the next test finds the node as
    it was (warm runners and Pods of its own would go on running beside the next test). Its gates are
    opened first, so that a job it held ends."""
    made, gates = len(stack.namespaces), len(stack.gates)
    yield
    for gate in stack.gates[gates:]:  # a test that failed before opening its gate leaves its job held
        gate.open()
    try:
        for ns in stack.namespaces[made:]:
            stack.clear(ns)
    finally:
        for gate in stack.gates[gates:]:
            gate.close()
