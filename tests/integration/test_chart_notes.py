"""The chart's NOTES.txt as `helm install` prints it, against a real API server: the webhook URL for every
`webhook.service.type` (and the Ingress), the namespaces a first RunnerGroup and its Secret go in for every
runner-namespace layout, and the warning of a cluster without a default StorageClass (a lookup, so only a
server-side dry run, as an install, says it; `helm template` cannot).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.helm_release import CHART, helm_home
from tests.kube_cluster import KubeCluster, api_request, peer

pytestmark = pytest.mark.kube
SVC = "runners-gitea-runner-scaler-webhook"
IN_CLUSTER = f"http://{SVC}.ci.svc:80/webhook"
NO_DEFAULT_CLASS = "WARNING: this cluster has no default StorageClass"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"


def notes(kube: KubeCluster, home: Path, *sets: str, server: bool = False) -> str:
    """The notes `helm install runners -n ci` prints, without installing (a server-side dry run looks up)."""
    args = [str(peer("helm")), "install", "runners", str(CHART), "-n", "ci", "-o", "json"]
    args += ["--dry-run=server" if server else "--dry-run=client", "--kubeconfig", str(kube.kubeconfig)]
    for s in ("gitea.url=https://gitea.example.com", *sets):
        args += ["--set", s]
    env = {**os.environ, **helm_home(home)}
    done = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["info"]["notes"])


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "helm"


@pytest.mark.parametrize(
    ("sets", "shown", "not_shown"),
    [
        pytest.param((), [IN_CLUSTER, "an in-cluster address"], ["NODE_PORT", "LB_ADDRESS"], id="ClusterIP"),
        pytest.param(
            ("webhook.service.type=NodePort",),
            [
                "http://$NODE_ADDRESS:$NODE_PORT/webhook",
                f"NODE_PORT=$(kubectl -n ci get svc {SVC} -o jsonpath='{{.spec.ports[0].nodePort}}')",
                "NODE_ADDRESS=$(kubectl get nodes -o jsonpath=",
            ],
            [IN_CLUSTER, "LB_ADDRESS"],
            id="NodePort",
        ),
        pytest.param(
            ("webhook.service.type=NodePort", "webhook.service.nodePort=30080"),
            ["http://$NODE_ADDRESS:$NODE_PORT/webhook", "NODE_PORT=30080"],
            [IN_CLUSTER, "get svc"],
            id="NodePort-fixed",
        ),
        pytest.param(
            ("webhook.service.type=LoadBalancer", "webhook.service.port=8080"),
            [
                "http://$LB_ADDRESS:8080/webhook",
                f"LB_ADDRESS=$(kubectl -n ci get svc {SVC} -o jsonpath='{{.status.loadBalancer.ingress[0].ip}}",
            ],
            [IN_CLUSTER, "NODE_PORT"],
            id="LoadBalancer",
        ),
        pytest.param(
            ("webhook.ingress.enabled=true", "webhook.ingress.host=hooks.example.com", "webhook.path=/in"),
            ["http://hooks.example.com/in"],
            [IN_CLUSTER, "https://hooks", "NODE_PORT", "LB_ADDRESS"],
            id="Ingress",
        ),
        pytest.param(
            (
                "webhook.ingress.enabled=true",
                "webhook.ingress.host=hooks.example.com",
                "webhook.ingress.tls[0].hosts[0]=hooks.example.com",
                "webhook.ingress.tls[0].secretName=hooks-tls",
            ),
            ["https://hooks.example.com/webhook"],
            [IN_CLUSTER, "http://hooks"],
            id="Ingress-TLS",
        ),
        pytest.param(
            ("webhook.manage.enabled=true", "webhook.manage.url=https://hooks.example.com/webhook"),
            ["the controller installs it", "delivering to https://hooks.example.com/webhook", "WebhookInstalled"],
            [IN_CLUSTER, "The webhook secret:", "NODE_PORT"],
            id="managed",
        ),
    ],
)
def test_the_notes_give_the_webhook_url_gitea_can_reach_for_each_service_type(
    kube: KubeCluster, home: Path, sets: tuple[str, ...], shown: list[str], not_shown: list[str]
) -> None:
    text = notes(kube, home, *sets)
    for line in shown:
        assert line in text, text
    for line in not_shown:
        assert line not in text, text


@pytest.mark.parametrize(
    ("sets", "group_ns", "labelled", "served"),
    [
        pytest.param((), "ci", ["ci"], "served in: ci; their token Secrets are read in: ci.", id="release"),
        pytest.param(
            ("runnerNamespaces={team-a,team-b}",),
            "team-a",
            ["team-a", "team-b"],
            "served in: team-a, team-b (runnerNamespaces); their token Secrets are read in: team-a, team-b.",
            id="runnerNamespaces",
        ),
        pytest.param(
            ("runnerNamespaces={team-a,team-b}", "rbac.secretNamespaces={team-b}"),
            "team-b",
            ["team-a", "team-b"],
            "their token Secrets are read in: team-b.",
            id="secretNamespaces",
        ),
        pytest.param(
            ("rbac.clusterWide=true", "rbac.secretNamespaces={tokens}"),
            "tokens",
            ["tokens"],
            "served in every namespace (rbac.clusterWide); their token Secrets are read in: tokens.",
            id="clusterWide",
        ),
    ],
)
def test_the_notes_put_the_first_group_and_its_secret_where_the_reconciler_serves_and_reads_them(
    kube: KubeCluster, home: Path, sets: tuple[str, ...], group_ns: str, labelled: list[str], served: str
) -> None:
    text = notes(kube, home, *sets)
    assert served in text, text
    assert f"kubectl -n {group_ns} create secret generic gitea-runner-token" in text, text
    assert f"| kubectl -n {group_ns} apply -f -" in text, text
    shown = [line.split()[3] for line in text.splitlines() if "kubectl label namespace" in line]
    assert shown == labelled, text
    others = {"ci", "team-a", "team-b", "tokens"} - {group_ns}
    assert not [ns for ns in others if f"kubectl -n {ns} create secret" in text], text


def test_the_notes_warn_when_no_served_namespace_may_hold_a_groups_token(kube: KubeCluster, home: Path) -> None:
    text = notes(kube, home, "runnerNamespaces={team-a}", "rbac.secretNamespaces={tokens}")
    assert "WARNING: no namespace where RunnerGroups are served is one whose Secrets" in text, text
    assert "create secret" not in text, text


@pytest.fixture
def storage_classes(kube: KubeCluster) -> Iterator[list[str]]:
    """StorageClasses the test creates (names), deleted afterwards."""
    made: list[str] = []
    yield made
    for name in made:
        api_request(kube, "DELETE", f"{CLASSES}/{name}")


def _storage_class(kube: KubeCluster, name: str, *, default: bool) -> None:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    body = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations},
        "provisioner": "example.com/none",
    }
    status, answer = api_request(kube, "POST", CLASSES, body)
    assert status == 201, answer


def test_an_install_on_a_cluster_without_a_default_storage_class_says_so(
    kube: KubeCluster, home: Path, storage_classes: list[str]
) -> None:
    """No default StorageClass: the install's notes warn, naming the claims and the values that fix it;
    a class named in the values, persistence off, or a default class in the cluster: no warning."""
    status, listed = api_request(kube, "GET", CLASSES)
    assert status == 200 and not listed["items"], listed  # the session's API server has none of its own
    storage_classes.append("slow")
    _storage_class(kube, "slow", default=False)

    text = notes(kube, home, "cache.enabled=true", server=True)
    assert NO_DEFAULT_CLASS in text, text
    assert "redis.persistence and cache.persistence name none" in text, text
    assert NO_DEFAULT_CLASS not in notes(kube, home, "redis.persistence.storageClass=slow", server=True)
    assert NO_DEFAULT_CLASS not in notes(kube, home, "redis.persistence.enabled=false", server=True)
    assert NO_DEFAULT_CLASS not in notes(kube, home, server=False), "a client-side render looks nothing up"

    storage_classes.append("standard")
    _storage_class(kube, "standard", default=True)
    assert NO_DEFAULT_CLASS not in notes(kube, home, "cache.enabled=true", server=True)
