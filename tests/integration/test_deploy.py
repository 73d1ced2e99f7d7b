"""The Helm chart with real helm and kubeconform, applied to a real API server; the image's install step.

The reconciler then runs under the chart's own ServiceAccount and RBAC (a token for that account):
least privilege is enough, and what lies outside it is really forbidden.
"""

from __future__ import annotations

import base64
import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from redis.asyncio import Redis

from reconciler.crd import crd
from tests.integration.test_reconciler import (
    RG,
    eventually,
    group,
    group_status,
    queue,
    runner_jobs,
    running_controller,
)
from tests.kube_cluster import KubeCluster, api_request, peer
from tests.kube_schemas import write_schemas
from tests.redis_server import RedisServer, free_port, wait_port

pytestmark = pytest.mark.kube
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "gitea-runner-scaler"
KUBE_VERSION = "1.36.3"
RELEASE = "grs"
VALUES = sorted((CHART / "ci").glob("*.yaml"))


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(peer("helm")), *args], capture_output=True, text=True, check=False)


def render(namespace: str, *values: Path, sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    args = ["template", RELEASE, str(CHART), "-n", namespace, "--kube-version", KUBE_VERSION, "--include-crds"]
    for v in values:
        args += ["-f", str(v)]
    for s in sets:
        args += ["--set", s]
    done = helm(*args)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.parametrize("values", VALUES, ids=lambda p: p.stem)
def test_helm_lint(values: Path) -> None:
    done = helm("lint", str(CHART), "-f", str(values), "--kube-version", KUBE_VERSION, "--strict")
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        pytest.param(("webhook.replicas=0",), "replicas", id="no-webhook-replicas"),
        pytest.param(("redis.enabled=false",), "url", id="external-redis-without-url"),
        pytest.param(("redis.appendfsync=sometimes",), "appendfsync", id="bad-fsync"),
        pytest.param(("webhook.path=no-slash",), "path", id="bad-path"),
        pytest.param(("unknownKey=1",), "unknownKey", id="unknown-value"),
    ],
)
def test_values_schema_rejects_bad_values(sets: tuple[str, ...], message: str) -> None:
    args = ["template", RELEASE, str(CHART), "--kube-version", KUBE_VERSION]
    for s in sets:
        args += ["--set", s]
    done = helm(*args)
    assert done.returncode != 0
    assert message in done.stderr


def test_chart_crd_is_the_generated_crd() -> None:
    chart_crd = yaml.safe_load((CHART / "crds" / "gitea.bpg.pw_runnergroups.yaml").read_text())
    assert chart_crd == crd()


def test_plain_manifests_are_current(tmp_path: Path) -> None:
    out = tmp_path / "manifests.yaml"
    done = subprocess.run(
        ["bash", str(ROOT / "deploy" / "render-manifests.sh"), str(out)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert out.read_text() == (ROOT / "deploy" / "manifests" / "gitea-runner-scaler.yaml").read_text(), (
        "run: bash deploy/render-manifests.sh"
    )


def test_defaults_are_hardened_and_keep_secrets_in_refs() -> None:
    docs = render("ci")
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    assert {d["metadata"]["name"] for d in workloads} == {
        "grs-gitea-runner-scaler-webhook",
        "grs-gitea-runner-scaler-reconciler",
        "grs-gitea-runner-scaler-redis",
    }
    for w in workloads:
        pod = w["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert c["resources"]["limits"]["memory"]
            assert "livenessProbe" in c and "readinessProbe" in c
            for env in c.get("env", []):
                if "SECRET" in env["name"] or "PASSWORD" in env["name"]:
                    assert "value" not in env and "secretKeyRef" in env["valueFrom"], env
    kinds = {d["kind"] for d in docs}
    assert {"PodDisruptionBudget", "Role", "RoleBinding", "CustomResourceDefinition"} <= kinds
    assert "ClusterRole" not in kinds and "Ingress" not in kinds and "NetworkPolicy" not in kinds
    # No rule anywhere grants Secrets beyond `get` in named namespaces.
    for role in (d for d in docs if d["kind"] in ("Role", "ClusterRole")):
        for rule in role["rules"]:
            if "secrets" in rule["resources"]:
                assert role["kind"] == "Role" and rule["verbs"] == ["get"]


def test_full_values_are_cluster_wide_without_cluster_wide_secrets() -> None:
    docs = render("ci", CHART / "ci" / "full-values.yaml")
    cluster_roles = [d for d in docs if d["kind"] == "ClusterRole"]
    assert len(cluster_roles) == 1
    assert not any("secrets" in r["resources"] for r in cluster_roles[0]["rules"])
    secret_roles = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-secrets")]
    assert sorted(d["metadata"]["namespace"] for d in secret_roles) == ["ci", "team-a"]
    ingress = next(d for d in docs if d["kind"] == "Ingress")
    assert [p["path"] for p in ingress["spec"]["rules"][0]["http"]["paths"]] == ["/webhook"]
    assert {"NetworkPolicy", "ServiceMonitor", "PrometheusRule", "ConfigMap"} <= {d["kind"] for d in docs}


def test_rendered_chart_and_examples_pass_kubeconform(kube: KubeCluster, tmp_path: Path) -> None:
    schemas = write_schemas(kube, tmp_path / "schemas", crds=[crd()])
    files = []
    for values in VALUES:
        out = tmp_path / f"{values.stem}.yaml"
        out.write_text(yaml.safe_dump_all(render("ci", values)))
        files.append(str(out))
    done = subprocess.run(
        [
            str(peer("kubeconform")),
            "-strict",
            "-summary",
            "-schema-location",
            f"{schemas}/{{{{ .ResourceKind }}}}{{{{ .KindSuffix }}}}.json",
            # The Prometheus operator's kinds are not served by a bare API server.
            "-skip",
            "ServiceMonitor,PrometheusRule",
            *files,
            str(ROOT / "deploy" / "examples"),
            str(ROOT / "deploy" / "manifests"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Invalid: 0, Errors: 0" in done.stdout


# -- applied to the API server --------------------------------------------------------------------

_PLURALS: dict[str, tuple[str, bool]] = {}


def _resource_path(kube: KubeCluster, api_version: str, kind: str) -> tuple[str, bool]:
    if not _PLURALS:
        for gv in [
            "v1",
            *[
                f"{g['name']}/{v['version']}"
                for g in api_request(kube, "GET", "/apis")[1]["groups"]
                for v in g["versions"]
            ],
        ]:
            base = "/api/v1" if gv == "v1" else f"/apis/{gv}"
            for r in api_request(kube, "GET", base)[1].get("resources", []):
                if "/" not in r["name"]:
                    _PLURALS[f"{gv}/{r['kind']}"] = (f"{base}/{{ns}}{r['name']}", r["namespaced"])
    return _PLURALS[f"{api_version}/{kind}"]


def apply(kube: KubeCluster, doc: dict[str, Any], namespace: str) -> int:
    path, namespaced = _resource_path(kube, doc["apiVersion"], doc["kind"])
    path = path.format(ns=f"namespaces/{namespace}/" if namespaced else "")
    if namespaced:
        doc.setdefault("metadata", {}).setdefault("namespace", namespace)
    status, body = api_request(kube, "POST", path, doc)
    assert status in (201, 409), (doc["kind"], doc["metadata"]["name"], body)
    return status


def sa_token(kube: KubeCluster, namespace: str, name: str) -> str:
    status, body = api_request(
        kube,
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {"spec": {"expirationSeconds": 3600}},
    )
    assert status == 201, body
    return str(body["status"]["token"])


async def test_reconciler_runs_under_the_charts_rbac_and_nothing_more(
    kube: KubeCluster, redis_server: RedisServer, tmp_path: Path
) -> None:
    ns = f"chart-{uuid.uuid4().hex[:6]}"
    other = f"other-{uuid.uuid4().hex[:6]}"
    for name in (ns, other):
        assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": name}})[0] == 201
    for doc in render(ns):
        apply(kube, doc, ns)
    token = sa_token(kube, ns, "grs-gitea-runner-scaler-reconciler")
    kubeconfig = kube.write_kubeconfig_for(tmp_path / "sa-kubeconfig", token=token)

    def as_sa(method: str, path: str, body: Any = None) -> int:
        return api_request(kube, method, path, body, token=token)[0]

    secret = {
        "metadata": {"name": "gitea"},
        "data": {"api": base64.b64encode(b"tok").decode(), "reg": base64.b64encode(b"reg").decode()},
    }
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", secret)[0] == 201
    assert api_request(kube, "POST", RG.format(ns=ns), group("chart-group", labels=[], defaultLabels=[]))[0] == 201

    redis = Redis.from_url(redis_server.url)
    await redis.flushall()
    await queue(redis, 4242, labels=[])
    async with running_controller(kubeconfig, redis_server.url, ns, poll_enabled=True, poll_interval=1):
        jobs = await eventually(lambda: runner_jobs(kube, ns))
        assert jobs[0]["metadata"]["annotations"]["gitea.bpg.pw/job-id"] == "4242"
        await eventually(lambda: group_status(kube, ns, "chart-group").get("activeRunners") == 1)
        # The poll read the authToken Secret (get): Gitea is unreachable, not the Secret.
        cond = await eventually(
            lambda: (
                group_status(kube, ns, "chart-group")["conditions"].get("GiteaReachable", {}).get("reason")
                == "PollFailed"
            )
        )
        assert cond
    await redis.aclose()

    # What the chart allows the reconciler...
    assert as_sa("GET", f"/api/v1/namespaces/{ns}/secrets/gitea") == 200
    assert as_sa("GET", RG.format(ns=ns)) == 200
    # ...and what it does not.
    assert as_sa("GET", f"/api/v1/namespaces/{ns}/secrets") == 403  # no list: only named gets
    assert as_sa("GET", f"/api/v1/namespaces/{other}/secrets/any") == 403
    assert as_sa("GET", "/api/v1/secrets") == 403
    assert as_sa("GET", f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{other}/runnergroups") == 403
    assert as_sa("DELETE", RG.format(ns=ns) + "/chart-group") == 403
    assert (
        as_sa(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "x"}]}},
        )
        == 403
    )
    assert as_sa("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles") == 403


def test_image_install_step_gives_working_entry_points(tmp_path: Path) -> None:
    venv = tmp_path / "image"
    done = subprocess.run(
        ["sh", str(ROOT / "deploy" / "image-install.sh"), str(venv), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    refused = subprocess.run(
        [str(venv / "bin" / "webhook-scaler")], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert refused.returncode == 2 and "GRS_WEBHOOK_SECRET" in refused.stderr
    no_cluster = subprocess.run(
        [str(venv / "bin" / "reconciler")], env=env, capture_output=True, text=True, check=False, timeout=60
    )
    assert no_cluster.returncode == 2 and "Kubernetes configuration" in no_cluster.stderr
    port = free_port()
    proc = subprocess.Popen(
        [str(venv / "bin" / "webhook-scaler")],
        env={**env, "GRS_WEBHOOK_SECRET": "s", "GRS_LISTEN_HOST": "127.0.0.1", "GRS_LISTEN_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, timeout=30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # SIGTERM: a graceful stop
