"""The Helm chart with real helm and kubeconform, applied to a real API server; the image's install step.

The reconciler then runs under the chart's own ServiceAccount and RBAC (a token for that account):
least privilege is enough, and what lies outside it is really forbidden.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import os
import re
import shutil
import subprocess
import tomllib
import urllib.request
import uuid
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml
from redis.asyncio import Redis

from reconciler.kube import crd_apply, secrets
from reconciler.kube.crd import crd
from reconciler.kube.placement import Nodes, Placement
from reconciler.loop.retiring.drain import FINALIZER
from reconciler.loop.rounds.controller import Controller
from reconciler.metrics import QUEUE_WAIT_BUCKETS
from reconciler.settings import Settings as ReconcilerSettings
from tests.e2e.node_stack import wait_for
from tests.fake_gitea import FakeGitea
from tests.groups import spec_dict
from tests.integration.test_check import COMMAND, write_status
from tests.integration.test_reconciler import (
    API_TOKEN,
    REG_TOKEN,
    RG,
    MakeServer,
    eventually,
    group,
    group_status,
    namespace,
    queue,
    runner_jobs,
    running_controller,
)
from tests.kube_cluster import KubeCluster, api_request, peer, runner_of
from tests.kube_schemas import write_schemas
from tests.redis_server import RedisServer, free_port, wait_port
from tests.unit.test_check import status as served_status
from webhook_scaler.config import load
from webhook_scaler.settings import Settings as ReceiverSettings

pytestmark = pytest.mark.kube
ROOT = Path(__file__).resolve().parents[2]
PROJECT_VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
CHART = ROOT / "deploy" / "helm" / "gitea-runner-scaler"
KUBE_VERSION = "1.36.3"
RELEASE = "grs"
VALUES = sorted((CHART / "ci").glob("*.yaml"))
FULL = f"{RELEASE}-gitea-runner-scaler"
RECONCILER = f"{RELEASE}-gitea-runner-scaler-reconciler"  # its Deployment


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
        pytest.param(("global.imageRegistry=https://mirror",), "imageRegistry", id="registry-with-scheme"),
        pytest.param(("gitea.url=gitea.example.com",), "/gitea/url", id="default-gitea-without-scheme"),
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


def _hardened(workload: dict[str, Any]) -> None:
    """Meets the `restricted` Pod Security profile, with limits and probes, and its secrets in refs."""
    pod = workload["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert c["resources"]["limits"]["memory"]
        assert "livenessProbe" in c and "readinessProbe" in c
        for env in c.get("env", []):
            if env["name"].endswith("_FILE"):  # a mounted Secret's path
                assert env["value"].startswith("/etc/gitea-runner-scaler/"), env
            elif "SECRET" in env["name"] or "PASSWORD" in env["name"]:
                names = env["name"].endswith("_NAME") or env["name"] == "GRS_PROTECTED_SECRETS"  # names only
                assert ("value" not in env and "secretKeyRef" in env["valueFrom"]) or names, env


def test_defaults_are_hardened_and_keep_secrets_in_refs() -> None:
    docs = render("ci")
    workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    assert {d["metadata"]["name"] for d in workloads} == {
        "grs-gitea-runner-scaler-webhook",
        "grs-gitea-runner-scaler-reconciler",
        "grs-gitea-runner-scaler-redis",
    }
    for w in workloads:
        _hardened(w)
    # No RunnerGroup may use the install's own Secrets (the reconciler refuses to read them for one).
    reconciler = next(w for w in workloads if w["metadata"]["name"] == RECONCILER)
    assert _env(reconciler)["GRS_PROTECTED_SECRETS"] == f"ci/{FULL}-webhook,ci/{FULL}-redis"
    kinds = {d["kind"] for d in docs if not _hook(d)}
    assert {"PodDisruptionBudget", "Role", "RoleBinding", "CustomResourceDefinition"} <= kinds
    assert "ClusterRole" not in kinds and "Ingress" not in kinds
    # Cluster-wide, only the CRD hook's account, for the one CRD, while the hook runs.
    (hook_role,) = [d for d in docs if d["kind"] == "ClusterRole"]
    assert _hook(hook_role) and [r["resourceNames"] for r in hook_role["rules"]] == [["runnergroups.gitea.bpg.pw"]]
    # NetworkPolicy on by default: only the chart's own Pods reach Redis, so runner Pods do not.
    redis = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == f"{FULL}-redis")
    (allowed,) = redis["spec"]["ingress"]
    (peer,) = allowed["from"]
    ours = {"app.kubernetes.io/name": "gitea-runner-scaler", "app.kubernetes.io/instance": RELEASE}
    assert peer["podSelector"]["matchLabels"] == ours
    # A runner Pod carries the managed-by label whatever its podTemplate says: it never matches.
    assert peer["podSelector"]["matchExpressions"] == [{"key": "gitea.bpg.pw/managed-by", "operator": "DoesNotExist"}]
    # No rule grants Secrets beyond `get` and `create` (each runner's credential) in named namespaces, but
    # the install hook's: it creates the two generated Secrets and may read and patch those two only.
    for role in (d for d in docs if d["kind"] in ("Role", "ClusterRole")):
        hook = (role["metadata"].get("annotations") or {}).get("helm.sh/hook")
        for rule in role["rules"]:
            if "secrets" not in rule["resources"]:
                continue
            assert role["kind"] == "Role"
            if hook:
                assert rule["verbs"] == ["create"] or (
                    rule["verbs"] == ["get", "patch"]
                    and rule["resourceNames"] == ["grs-gitea-runner-scaler-webhook", "grs-gitea-runner-scaler-redis"]
                )
            else:
                assert rule["verbs"] in (["get"], ["create"])


def test_a_render_is_the_same_every_time_and_carries_no_secret_value() -> None:
    """GitOps (Argo CD renders with `helm template`): no random value, no Secret data in the output."""
    first, second = render("ci"), render("ci")
    assert first == second
    assert not [d for d in first if d["kind"] == "Secret"]
    job = next(d for d in first if d["kind"] == "Job" and d["metadata"]["name"].endswith("-secrets"))
    assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-2:] == [
        "grs-gitea-runner-scaler-webhook:webhook-secret",
        "grs-gitea-runner-scaler-redis:redis-password",
    ]
    # With both Secrets your own, no hook at all.
    own = render("ci", CHART / "ci" / "external-redis-values.yaml")
    assert not [d for d in own if _hook(d) and d["metadata"]["name"].endswith("-secrets")]
    assert not [d for d in render("ci", sets=("crds.upgrade=false",)) if _hook(d) and "crds" in d["metadata"]["name"]]


def _hook(doc: dict[str, Any]) -> bool:
    return bool((doc["metadata"].get("annotations") or {}).get("helm.sh/hook"))


def _env(doc: dict[str, Any], container: int = 0) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in doc["spec"]["template"]["spec"]["containers"][container]["env"]}


def test_named_gitea_instances_reach_both_processes_as_their_settings_read_them() -> None:
    sets = ("giteaInstances.second=https://gitea-b.example", "giteaInstances.a-third=http://gitea-c:3000")
    docs = [d for d in render("ci", sets=sets) if d["kind"] == "Deployment" and "redis" not in d["metadata"]["name"]]
    values = {_env(d).get("GRS_GITEA_INSTANCES") for d in docs}
    assert values == {"a-third=http://gitea-c:3000,second=https://gitea-b.example"} and len(docs) == 2
    (value,) = values
    assert ReceiverSettings(webhook_secrets=["[second] s"], gitea_instances=value).instances == {
        "a-third": "http://gitea-c:3000",
        "second": "https://gitea-b.example",
    }
    assert not [d for d in render("ci") if d["kind"] == "Deployment" and "GRS_GITEA_INSTANCES" in _env(d)]


def _reconciler_settings(*sets: str) -> ReconcilerSettings:
    """The reconciler's settings as it reads its rendered env (the values it has, not those from references)."""
    (doc,) = [d for d in render("ci", sets=sets) if _is_reconciler(d)]
    env = {e["name"]: e["value"] for e in doc["spec"]["template"]["spec"]["containers"][0]["env"] if "value" in e}
    return load(ReconcilerSettings, env)


def test_the_admins_placement_and_owner_pins_reach_the_reconciler_as_its_settings_read_them() -> None:
    """runnerPlacement as GRS_RUNNER_PLACEMENT, namespaceOwners as GRS_NAMESPACE_OWNERS (owners as given, a
    namespace with "*" any), runnerPodPolicy.allowScheduling as GRS_RUNNER_POD_ALLOW_SCHEDULING; none by default."""
    (doc,) = [d for d in render("ci", CHART / "ci" / "full-values.yaml") if _is_reconciler(d)]
    settings = load(ReconcilerSettings, {k: v for k, v in _env(doc).items() if k.startswith("GRS_RUNNER_")})
    toleration = {"key": "dedicated", "operator": "Equal", "value": "ci", "effect": "NoExecute"}
    default = Nodes(node_selector={"example.com/pool": "ci"}, tolerations=(toleration,))
    assert settings.placement.of("ci") == settings.placement.of("elsewhere") == default
    assert settings.placement.of("team-a").node_selector == {"example.com/pool": "team-a"}
    assert _env(doc)["GRS_NAMESPACE_OWNERS"] == "ci=acme,platform=*,team-a=Acme|alice"
    pins = load(ReconcilerSettings, {"GRS_NAMESPACE_OWNERS": _env(doc)["GRS_NAMESPACE_OWNERS"]}).pins
    assert pins == {"ci": frozenset({"acme"}), "platform": None, "team-a": frozenset({"acme", "alice"})}
    assert not settings.runner_policy.scheduling
    assert _reconciler_settings("runnerPodPolicy.allowScheduling=true").runner_policy.scheduling
    defaults = _reconciler_settings()
    assert defaults.placement == Placement() and defaults.pins is None


def test_the_default_gitea_instance_reaches_the_reconciler_and_unset_is_the_one_unnamed_allowed_url() -> None:
    chosen = _reconciler_settings("gitea.url=https://gitea.example.com", "giteaURLs={https://a.example}")
    assert chosen.default_gitea == "https://gitea.example.com"
    named = ("giteaURLs={https://a.example,https://b.example}", "giteaInstances.second=https://b.example")
    assert _reconciler_settings(*named).default_gitea == "https://a.example"
    assert _reconciler_settings().default_gitea == ""
    docs = [d for d in render("ci", sets=("gitea.url=https://gitea.example.com",)) if d["kind"] == "Deployment"]
    assert [d["metadata"]["name"] for d in docs if "GRS_GITEA_URL" in _env(d)] == [RECONCILER]  # not the receivers'


def test_managed_webhooks_reach_both_processes_with_one_generated_key_and_need_a_url() -> None:
    """webhook.manage: the reconciler gets GRS_WEBHOOK_MANAGE, the URL Gitea delivers to, and the key's file;
    the receivers the same key's file; the install hook generates that key beside the webhook secret. Off by
    default; on without a URL (or an Ingress) the install fails saying which value is missing."""
    docs = render("ci", sets=("webhook.manage.enabled=true", "webhook.manage.url=https://runners.example/webhook"))
    deployments = {
        d["metadata"]["name"]: _env(d)
        for d in docs
        if d["kind"] == "Deployment" and "redis" not in d["metadata"]["name"]
    }
    reconciler = deployments.pop(RECONCILER)
    assert reconciler["GRS_WEBHOOK_MANAGE"] == "true"
    assert reconciler["GRS_WEBHOOK_URL"] == "https://runners.example/webhook"
    (receiver,) = deployments.values()
    (key_file,) = {
        reconciler["GRS_WEBHOOK_KEY_FILE"].rsplit("/", 1)[1],
        receiver["GRS_WEBHOOK_KEY_FILE"].rsplit("/", 1)[1],
    }
    (hook,) = [d for d in docs if d["kind"] == "Job" and _hook(d) and d["metadata"]["name"].endswith("-secrets")]
    assert (
        f"{RELEASE}-gitea-runner-scaler-webhook:{key_file}"
        in hook["spec"]["template"]["spec"]["containers"][0]["command"]
    )
    assert not [d for d in render("ci") if d["kind"] == "Deployment" and "GRS_WEBHOOK_KEY_FILE" in _env(d)]
    failed = helm("template", RELEASE, str(CHART), "--set", "webhook.manage.enabled=true")
    assert failed.returncode != 0 and "webhook.manage.enabled needs webhook.manage.url" in failed.stderr


def test_numbers_render_as_the_settings_parser_reads_them() -> None:
    docs = {
        d["metadata"]["name"]: d for d in render("ci", CHART / "ci" / "full-values.yaml") if d["kind"] == "Deployment"
    }
    webhook = _env(docs["grs-gitea-runner-scaler-webhook"])
    reconciler = _env(docs["grs-gitea-runner-scaler-reconciler"])
    assert webhook["GRS_MAX_BODY_BYTES"] == "20000000"
    assert reconciler["GRS_POLL_INTERVAL"] == "12.5"
    assert reconciler["GRS_RUNNER_BACKOFF_MAX"] == "600"
    defaults = {d["metadata"]["name"]: d for d in render("ci") if d["kind"] == "Deployment"}
    assert _env(defaults["grs-gitea-runner-scaler-webhook"])["GRS_MAX_BODY_BYTES"] == "1048576"
    for doc in [*docs.values(), *defaults.values()]:
        for name, value in _env(doc).items():
            assert "e+" not in value, (name, value)


def _is_reconciler(doc: dict[str, Any]) -> bool:
    return bool(doc["kind"] == "Deployment" and doc["metadata"]["name"] == RECONCILER)


def test_the_gitea_ca_and_the_proxy_reach_the_reconciler() -> None:
    (doc,) = [d for d in render("ci", CHART / "ci" / "full-values.yaml") if _is_reconciler(d)]
    pod = doc["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = _env(doc)
    assert env["GRS_GITEA_CA_FILE"] == "/etc/gitea-runner-scaler/gitea-ca/ca-bundle.pem"
    assert env["HTTPS_PROXY"] == "http://proxy.example.com:3128" and env["NO_PROXY"].startswith(".svc,")
    assert "HTTP_PROXY" not in env, "an empty value sets nothing"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["gitea-ca"]["mountPath"] == "/etc/gitea-runner-scaler/gitea-ca" and "scratch" in mounts
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["gitea-ca"]["configMap"]["name"] == "internal-ca" and "scratch" in volumes
    (default,) = [d for d in render("ci") if _is_reconciler(d)]
    assert not {"GRS_GITEA_CA_FILE", "HTTPS_PROXY"} & set(_env(default))
    assert "volumes" not in default["spec"]["template"]["spec"]


def test_the_shared_cache_server_is_hardened_and_its_secret_reaches_the_runner_namespaces() -> None:
    docs = render("ci", CHART / "ci" / "full-values.yaml")
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    cache = by_name["Deployment", f"{FULL}-cache"]
    _hardened(cache)
    (server,) = cache["spec"]["template"]["spec"]["containers"]
    assert server["env"] == [
        {"name": "CACHE_SECRET", "valueFrom": {"secretKeyRef": {"name": f"{FULL}-cache", "key": "cache-secret"}}}
    ]
    address = f"{FULL}-cache.ci.svc.cluster.local"
    assert "cache-server --config /run/cache-server/config.yaml --dir /cache" in server["args"][0]
    assert f"--host {address} --port 8088" in server["args"][0]
    claim = by_name["PersistentVolumeClaim", f"{FULL}-cache"]
    assert claim["spec"]["storageClassName"] == "fast" and claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert by_name["Service", f"{FULL}-cache"]["spec"]["ports"][0]["port"] == 8088
    env = _env(by_name["Deployment", RECONCILER])
    assert env["GRS_RUNNER_CACHE_URL"] == f"http://{address}:8088/"
    assert env["GRS_RUNNER_CACHE_SECRET_FILE"] == "/etc/gitea-runner-scaler/runner-cache/cache-secret"
    assert env["GRS_RUNNER_CACHE_SECRET_NAME"] == f"{FULL}-runner-cache"
    # The reconciler keeps the runners' copy in the namespaces whose Secrets it may read, and no other.
    for ns in ("ci", "team-a"):
        role = next(d for d in docs if d["kind"] == "Role" and d["metadata"]["namespace"] == ns and not _hook(d))
        granted = [(r["verbs"], r.get("resourceNames")) for r in role["rules"]]
        assert granted == [(["get"], None), (["create"], None), (["patch"], [f"{FULL}-runner-cache"])], granted
    job = by_name["Job", f"{FULL}-secrets"]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"][-1] == f"{FULL}-cache:cache-secret"
    assert by_name["NetworkPolicy", f"{FULL}-cache"]["spec"]["ingress"][0]["from"][0]["podSelector"] == {
        "matchLabels": {"gitea.bpg.pw/managed-by": "gitea-runner-scaler"}
    }
    assert not [d for d in render("ci") if "cache" in d["metadata"]["name"]], "off by default"


def _images(docs: list[dict[str, Any]]) -> set[str]:
    pods = [d["spec"]["template"]["spec"] for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")]
    return {c["image"] for p in pods for c in (*p.get("initContainers", []), *p["containers"])}


def test_images_come_from_their_registries_or_all_from_the_one_registry_given() -> None:
    """The release's own image at the chart's appVersion, Redis's and the cache server's from Docker Hub;
    `global.imageRegistry` moves all of them to a mirror, keeping repositories and tags."""
    full = CHART / "ci" / "full-values.yaml"
    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    defaults = {f"ghcr.io/bpg-pw/gitea-runner-scaler:{version}", "docker.io/library/redis:7.2-alpine"}
    assert _images(render("ci")) == defaults
    mirrored = {ref.replace("ghcr.io/", "mirror.local:5000/").replace("docker.io/", "mirror.local:5000/")
                for ref in _images(render("ci", full))}  # fmt: skip
    assert "mirror.local:5000/gitea/act_runner:0.2.13" in mirrored
    assert _images(render("ci", full, sets=("global.imageRegistry=mirror.local:5000",))) == mirrored
    # A repository naming its registry host, as values before `image.registry` did, keeps it; a mirror
    # still replaces it.
    hosted = ("image.repository=registry.example.com:5000/team/grs",)
    assert f"registry.example.com:5000/team/grs:{version}" in _images(render("ci", sets=hosted))
    assert f"mirror.local/team/grs:{version}" in _images(
        render("ci", sets=(*hosted, "global.imageRegistry=mirror.local"))
    )
    # An empty registry: the repository is the whole reference.
    assert f"example.org/grs:{version}" in _images(
        render("ci", sets=("image.registry=", "image.repository=example.org/grs"))
    )


def test_pod_values_reach_every_pod_and_drains_are_never_blocked() -> None:
    docs = render("ci", CHART / "ci" / "full-values.yaml")
    pods = {d["metadata"]["name"]: d["spec"]["template"] for d in docs if d["kind"] in ("Deployment", "StatefulSet")}
    for name, pod in pods.items():
        assert pod["metadata"]["annotations"]["example.com/team"] == "platform", name
        assert pod["metadata"]["labels"]["example.com/cost-center"] == "ci", name
        assert pod["spec"]["priorityClassName"] == "system-cluster-critical", name
    webhook = pods["grs-gitea-runner-scaler-webhook"]
    assert webhook["metadata"]["annotations"]["example.com/scrape"] == "true"
    assert webhook["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"
    assert {"name": "tmp", "mountPath": "/tmp"} in webhook["spec"]["containers"][0]["volumeMounts"]
    assert pods["grs-gitea-runner-scaler-redis"]["spec"]["nodeSelector"] == {"example.com/disk": "ssd"}
    assert pods["grs-gitea-runner-scaler-reconciler"]["spec"]["serviceAccountName"] == "runner-scaler"
    binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "runner-scaler"
    for pdb in (d for d in docs if d["kind"] == "PodDisruptionBudget"):
        assert pdb["spec"] == {**pdb["spec"], "maxUnavailable": 1} and "minAvailable" not in pdb["spec"]
    # The defaults: Redis keeps its data on a PVC.
    redis = next(d for d in render("ci") if d["kind"] == "StatefulSet")
    assert redis["spec"]["volumeClaimTemplates"][0]["spec"]["accessModes"] == ["ReadWriteOnce"]


def test_network_policy_lets_in_the_ingress_controller_and_prometheus() -> None:
    docs = render("ci", CHART / "ci" / "full-values.yaml")
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-webhook"))
    allowed = [
        p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        for p in policy["spec"]["ingress"][0]["from"]
    ]
    assert allowed == ["gitea", "ingress-nginx", "monitoring"]
    done = helm(
        "template", RELEASE, str(CHART), "-f", str(CHART / "ci" / "full-values.yaml"),
        "--set", "networkPolicy.ingressControllerFrom=null",
    )  # fmt: skip
    assert done.returncode != 0 and "ingressControllerFrom" in done.stderr


def test_dashboard_and_alerts_do_not_add_up_replicas() -> None:
    """Every reconciler replica exports the same per-group gauges: they are combined with max, never sum."""
    docs = render("ci", CHART / "ci" / "full-values.yaml")
    dashboard = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["gitea-runner-scaler.json"]
    rules = yaml.safe_dump(next(d for d in docs if d["kind"] == "PrometheusRule")["spec"])
    for text in (dashboard, rules):
        for gauge in ("grs_queued_jobs", "grs_active_runners"):
            assert f"sum by (group) ({gauge})" not in text
        assert "max by (group) (grs_queued_jobs" in text


def test_the_dashboard_asks_for_its_data_source_and_namespace_and_its_queries_parse(tmp_path: Path) -> None:
    """Every panel and query takes the `datasource` variable and scopes its series to `namespace`; the
    queue-wait panel is there, and the objective's, at the chart's objective; every query is PromQL that
    promtool accepts (as a recording rule)."""
    dashboard = json.loads((CHART / "dashboards" / "gitea-runner-scaler.json").read_text())
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["namespace"]["includeAll"] and "namespace" in variables["namespace"]["definition"]
    targets = [t for p in dashboard["panels"] for t in p["targets"]]
    assert all(p["datasource"]["uid"] == "${datasource}" for p in dashboard["panels"])
    assert all(t["datasource"]["uid"] == "${datasource}" for t in targets)
    for target in targets:
        selectors = re.findall(r"\b(?:grs_[a-z_]+|up)\{([^}]*)\}", target["expr"])
        assert selectors and all('namespace=~"$namespace"' in s for s in selectors), target["expr"]
    assert any("grs_job_queue_wait_seconds_bucket" in t["expr"] for t in targets)
    # the objective's panel: a choice among the histogram's bounds, the chart's objective by default
    objective = variables["objective"]
    assert [o["value"] for o in objective["options"]] == [f"{b:.1f}" for b in QUEUE_WAIT_BUCKETS]
    seconds = yaml.safe_load((CHART / "values.yaml").read_text())["metrics"]["prometheusRule"]["queueTime"]["seconds"]
    assert objective["current"]["value"] == f"{float(seconds):.1f}"
    assert any('le="$objective"' in t["expr"] for t in targets)
    rules = [
        {"record": f"panel:{i}", "expr": t["expr"].replace("$namespace", ".*").replace("$objective", "30.0")}
        for i, t in enumerate(targets)
    ]
    (tmp_path / "panels.yaml").write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: tests/setup.sh installs Debian's prometheus package"
    done = subprocess.run([promtool, "check", "rules", "panels.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_full_values_are_cluster_wide_without_cluster_wide_secrets() -> None:
    docs = render("ci", CHART / "ci" / "full-values.yaml")
    cluster_roles = [d for d in docs if d["kind"] == "ClusterRole" and not _hook(d)]
    assert len(cluster_roles) == 1
    assert not any("secrets" in r["resources"] for r in cluster_roles[0]["rules"])
    secret_roles = [
        d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-secrets") and not _hook(d)
    ]
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
    if namespaced:
        namespace = doc.setdefault("metadata", {}).setdefault("namespace", namespace)
    path = path.format(ns=f"namespaces/{namespace}/" if namespaced else "")
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
    kube: KubeCluster, redis_server: RedisServer, tmp_path: Path, aiohttp_server: MakeServer
) -> None:
    """Every path of the reconciler, under the chart's ServiceAccount: the token Secrets read for the poll,
    a runner Job and its credential Secret created, the status written, the finalizer set, the ghost
    sweep, and a deleted group's drain (its idle runner's Job deleted, the finalizer taken off); and
    what lies outside the chart's RBAC is refused."""
    ns = f"chart-{uuid.uuid4().hex[:6]}"
    other = f"other-{uuid.uuid4().hex[:6]}"
    for name in (ns, other):
        assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": name}})[0] == 201
    for doc in render(ns):
        if not _hook(doc):  # what `helm install` keeps as the release; the hook's own test is below
            apply(kube, doc, ns)
    token = sa_token(kube, ns, "grs-gitea-runner-scaler-reconciler")
    kubeconfig = kube.write_kubeconfig_for(tmp_path / "sa-kubeconfig", token=token)

    def as_sa(method: str, path: str, body: Any = None) -> int:
        return api_request(kube, method, path, body, token=token)[0]

    secret = {
        "metadata": {"name": "gitea"},
        "data": {
            "api": base64.b64encode(API_TOKEN.encode()).decode(),
            "reg": base64.b64encode(REG_TOKEN.encode()).decode(),
        },
    }
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", secret)[0] == 201
    fake = FakeGitea(token=API_TOKEN)
    url = str((await aiohttp_server(fake.app())).make_url("")).rstrip("/")
    fake.add_job(4242, repo="acme/widgets", labels=[])  # Gitea lists it queued: the poll keeps it
    assert (
        api_request(
            kube, "POST", RG.format(ns=ns), group("chart-group", labels=[], defaultLabels=[], gitea={"url": url})
        )[0]
        == 201
    )

    redis = Redis.from_url(redis_server.url)
    await redis.flushall()
    await queue(redis, 4242, labels=[])
    async with running_controller(
        kubeconfig, redis_server.url, ns, poll_enabled=True, poll_interval=1, gitea_url=url
    ) as controller:
        (job,) = await eventually(lambda: runner_jobs(kube, ns))
        await _served_under_the_chart(kube, ns, job, fake, controller)
        await _drained_under_the_chart(kube, ns, job, fake)
    await redis.aclose()

    # What the chart allows the reconciler...
    assert as_sa("GET", f"/api/v1/namespaces/{ns}/secrets/gitea") == 200
    assert as_sa("GET", RG.format(ns=ns)) == 200
    # ...and what it does not.
    assert as_sa("GET", f"/api/v1/namespaces/{ns}/secrets") == 403  # no list: only named gets
    assert as_sa("GET", f"/api/v1/namespaces/{other}/secrets/any") == 403
    assert as_sa("GET", "/api/v1/secrets") == 403
    # It made the runner's credential Secret, and may make Secrets only in the served namespace.
    assert api_request(kube, "GET", f"/api/v1/namespaces/{ns}/secrets/{runner_of(job)}")[0] == 200
    assert as_sa("POST", f"/api/v1/namespaces/{other}/secrets", {"metadata": {"name": "x"}}) == 403
    assert as_sa("DELETE", f"/api/v1/namespaces/{ns}/secrets/gitea") == 403
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


async def _served_under_the_chart(
    kube: KubeCluster, ns: str, job: dict[str, Any], fake: FakeGitea, controller: Controller
) -> None:
    """The create path, the Secret reads, the status and the finalizer, then the ghost sweep."""
    assert job["metadata"]["annotations"]["gitea.bpg.pw/job-id"] == "4242"
    path = RG.format(ns=ns) + "/chart-group"
    # The poll read the authToken Secret (get) and reached Gitea; the status says so (status patch).
    await eventually(
        lambda: (
            (s := group_status(kube, ns, "chart-group")).get("activeRunners") == 1
            and s["conditions"].get("GiteaReachable", {}).get("status") == "True"
        )
    )
    assert fake.requests["org_jobs"] or fake.requests["repo_jobs"], fake.requests
    await eventually(lambda: FINALIZER in (api_request(kube, "GET", path)[1]["metadata"].get("finalizers") or []))
    # A row an earlier runner of the group left behind, its Job gone: the sweep deletes it (the Jobs read).
    fake.add_runner(runner_of(job))  # the runner's own row, online and idle
    ghost = fake.add_runner(f"{job['metadata']['name']}.0badc0de", status="offline")
    assert [await controller.sweep_once() for _ in range(2)] == [0, 1], "a ghost goes at its second sweep"
    assert fake.deleted == [ghost]


async def _drained_under_the_chart(kube: KubeCluster, ns: str, job: dict[str, Any], fake: FakeGitea) -> None:
    """The group deleted: its idle runner disabled and deleted in Gitea, its Job deleted, the finalizer off."""
    path = RG.format(ns=ns) + "/chart-group"
    assert api_request(kube, "DELETE", path)[0] == 200
    await eventually(lambda: not runner_jobs(kube, ns), timeout=30)
    await eventually(lambda: api_request(kube, "GET", path)[0] == 404, timeout=30)
    assert len(fake.deleted) == 2 and not fake.runners, "the idle runner's row went with it"
    assert api_request(kube, "GET", f"/apis/batch/v1/namespaces/{ns}/jobs/{job['metadata']['name']}")[0] == 404


def _served(kube: KubeCluster, ns: str, *, active: int, poll: str) -> bool:
    status = group_status(kube, ns, "g")
    reason = status["conditions"].get("GiteaReachable", {}).get("reason")
    return bool(status.get("activeRunners") == active and reason == poll)


async def test_runners_in_namespaces_of_their_own_need_only_a_role_in_each(
    kube: KubeCluster, redis_server: RedisServer, tmp_path: Path
) -> None:
    """The recommended layout: the controller in its namespace, RunnerGroups and their runners in
    others (`runnerNamespaces`), served with a namespaced Role in each and nothing cluster-wide."""
    tag = uuid.uuid4().hex[:6]
    ctl, served, also, unserved = (f"{n}-{tag}" for n in ("ctl", "ci-a", "ci-b", "ci-c"))
    for name in (ctl, served, also, unserved):
        assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": name}})[0] == 201
    docs = [d for d in render(ctl, sets=(f"runnerNamespaces={{{served},{also}}}",)) if not _hook(d)]
    for doc in docs:
        apply(kube, doc, ctl)
    assert not [d for d in docs if d["kind"].startswith("Cluster") and d["kind"] != "CustomResourceDefinition"]
    (reconciler,) = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-reconciler")]
    watched = _env(reconciler)["GRS_WATCH_NAMESPACE"]
    assert watched == f"{served},{also}"
    token = sa_token(kube, ctl, "grs-gitea-runner-scaler-reconciler")
    kubeconfig = kube.write_kubeconfig_for(tmp_path / "sa-kubeconfig", token=token)

    data = {"api": base64.b64encode(API_TOKEN.encode()).decode(), "reg": base64.b64encode(REG_TOKEN.encode()).decode()}
    secret = {"metadata": {"name": "gitea"}, "data": data}
    redis = Redis.from_url(redis_server.url)
    await redis.flushall()
    for i, ns in enumerate((served, also, unserved)):
        assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", secret)[0] == 201
        rg = group("g", labels=[], defaultLabels=[], scope="repo", repo=f"acme/r{i}")
        assert api_request(kube, "POST", RG.format(ns=ns), rg)[0] == 201
        await queue(redis, 500 + i, labels=[], repo=f"acme/r{i}")
    async with running_controller(kubeconfig, redis_server.url, watched, poll_enabled=True, poll_interval=1):
        for i, ns in enumerate((served, also)):
            (job,) = await eventually(partial(runner_jobs, kube, ns))
            assert job["metadata"]["annotations"]["gitea.bpg.pw/job-id"] == str(500 + i)
            # Polled with its own namespace's Secret: Gitea is unreachable, not the Secret.
            await eventually(partial(_served, kube, ns, active=1, poll="PollFailed"))
    await redis.aclose()
    assert (
        runner_jobs(kube, unserved) == []
        and "status" not in api_request(kube, "GET", RG.format(ns=unserved))[1]["items"][0]
    )

    def as_sa(method: str, path: str) -> int:
        return api_request(kube, method, path, token=token)[0]

    assert as_sa("GET", f"/apis/batch/v1/namespaces/{served}/jobs") == 200
    for ns in (ctl, unserved):  # not even the controller's own namespace
        assert as_sa("GET", f"/apis/batch/v1/namespaces/{ns}/jobs") == 403
        assert as_sa("GET", RG.format(ns=ns)) == 403
        assert as_sa("GET", f"/api/v1/namespaces/{ns}/secrets/gitea") == 403
    assert as_sa("GET", "/apis/batch/v1/jobs") == 403


async def test_the_install_hook_creates_the_secrets_once_under_its_own_rbac(
    kube: KubeCluster, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # what the hook logs, as it logs in its Pod
    ns = f"hook-{uuid.uuid4().hex[:6]}"
    assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
    docs = [d for d in render(ns) if _hook(d) and d["metadata"]["name"].endswith("-secrets")]
    for doc in docs:
        if doc["kind"] != "Job":
            apply(kube, doc, ns)
    job = next(d for d in docs if d["kind"] == "Job")
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python", "-m", "reconciler.secrets"]
    namespace, wanted = secrets.parse(command[3:])
    assert namespace == ns
    # Someone made the webhook Secret already, with another key: ours is added, theirs kept.
    theirs = {
        "metadata": {"name": "grs-gitea-runner-scaler-webhook"},
        "data": {"note": base64.b64encode(b"x").decode()},
    }
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", theirs)[0] == 201
    token = sa_token(kube, ns, "grs-gitea-runner-scaler-secrets")
    kubeconfig = kube.write_kubeconfig_for(tmp_path / "hook-kubeconfig", token=token)

    def values() -> dict[str, dict[str, str]]:
        out = {}
        for name, _ in wanted:
            status, body = api_request(kube, "GET", f"/api/v1/namespaces/{ns}/secrets/{name}")
            assert status == 200, body
            out[name] = body["data"]
        return out

    await secrets.ensure(namespace, wanted, kubeconfig=str(kubeconfig))
    first = values()
    assert first["grs-gitea-runner-scaler-webhook"]["note"] == base64.b64encode(b"x").decode()
    for name, key in wanted:
        assert len(base64.b64decode(first[name][key])) == 48
    assert (
        first["grs-gitea-runner-scaler-webhook"]["webhook-secret"]
        != first["grs-gitea-runner-scaler-redis"]["redis-password"]
    )
    await secrets.ensure(namespace, wanted, kubeconfig=str(kubeconfig))  # every upgrade runs it again
    assert values() == first
    assert [r.written for r in caplog.records if r.msg == "secret ready"] == [True, True, False, False]  # type: ignore[attr-defined]
    assert not any(base64.b64decode(v).decode() in caplog.text for data in first.values() for v in data.values())
    # The hook's account reads no other Secret.
    other = {"metadata": {"name": "unrelated"}, "data": {"k": base64.b64encode(b"v").decode()}}
    assert api_request(kube, "POST", f"/api/v1/namespaces/{ns}/secrets", other)[0] == 201
    assert api_request(kube, "GET", f"/api/v1/namespaces/{ns}/secrets/unrelated", token=token)[0] == 403
    assert api_request(kube, "GET", f"/api/v1/namespaces/{ns}/secrets", token=token)[0] == 403


CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/runnergroups.gitea.bpg.pw"


def _put_crd(kube: KubeCluster, body: dict[str, Any], *, version: str, waiting: bool) -> None:
    """Replace the cluster's CRD with `body` as `version` applied it, serving status.waitingJobs or not."""
    body = copy.deepcopy(body)
    body["metadata"]["annotations"] = {crd_apply.VERSION_ANNOTATION: version}
    body["metadata"]["resourceVersion"] = api_request(kube, "GET", CRD_PATH)[1]["metadata"]["resourceVersion"]
    if not waiting:
        del body["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"][
            "waitingJobs"
        ]
    status, answer = api_request(kube, "PUT", CRD_PATH, body)
    assert status == 200, answer


def _serves_waiting(kube: KubeCluster) -> tuple[bool, str]:
    served = api_request(kube, "GET", CRD_PATH)[1]
    status = served["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    return "waitingJobs" in status, served["metadata"]["annotations"][crd_apply.VERSION_ANNOTATION]


async def test_the_crd_hook_brings_an_older_crd_up_to_date_and_leaves_a_newer_one(
    kube: KubeCluster, tmp_path: Path
) -> None:
    """What `helm upgrade` alone never does: the hook applies this version's CRD over an older one (its
    new status field served), under the hook's own account, which can touch no other CRD; a CRD a newer
    version applied (another install in the cluster) is left alone."""
    ns = f"crds-{uuid.uuid4().hex[:6]}"
    assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
    docs = [d for d in render(ns) if _hook(d) and d["metadata"]["name"].endswith("-crds")]
    assert {d["kind"] for d in docs} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Job"}
    for doc in docs:
        if doc["kind"] != "Job":
            apply(kube, doc, ns)
    (job,) = [d for d in docs if d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["python", "-m", "reconciler.crd_apply"]
    token = sa_token(kube, ns, "grs-gitea-runner-scaler-crds")
    kubeconfig = str(kube.write_kubeconfig_for(tmp_path / "hook-kubeconfig", token=token))
    try:
        _put_crd(kube, crd(), version="0.0.9", waiting=False)
        assert _serves_waiting(kube) == (False, "0.0.9")
        assert (await crd_apply.run(kubeconfig=kubeconfig, ours="0.1.0")).startswith("applied")
        assert _serves_waiting(kube) == (True, "0.1.0")
        _put_crd(kube, crd(), version="0.2.0", waiting=False)
        assert (await crd_apply.run(kubeconfig=kubeconfig, ours="0.1.0")).startswith("left as version 0.2.0")
        assert _serves_waiting(kube) == (False, "0.2.0")
    finally:
        _put_crd(kube, crd(), version=PROJECT_VERSION, waiting=True)
    other = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/other.example.com"
    assert api_request(kube, "GET", other, token=token)[0] == 403
    assert api_request(kube, "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", token=token)[0] == 403


def test_crd_versions_compare_by_their_release_numbers() -> None:
    assert crd_apply.release("0.10.2-rc1") == (0, 10, 2) and crd_apply.release("v1.2") == (1, 2)
    assert crd_apply.release("0.10.0") > crd_apply.release("0.9.9")  # type: ignore[operator]
    assert crd_apply.release("") is None and crd_apply.release("unknown") is None


def test_secrets_hook_refuses_bad_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    assert secrets.main(["ns"]) == 2
    assert secrets.main(["ns", "no-key"]) == 2
    assert "not SECRET:KEY" in capsys.readouterr().err


def test_image_install_step_gives_working_entry_points(tmp_path: Path) -> None:
    venv = tmp_path / "image"
    done = subprocess.run(
        ["sh", str(ROOT / "deploy" / "image-install.sh"), str(venv), str(ROOT), "0123456789ab"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    # The revision the image was built from (the Dockerfile's REVISION argument), as `--version` says it.
    stamped = subprocess.run([str(venv / "bin" / "reconciler"), "--version"], env=env, capture_output=True, text=True)
    assert stamped.stdout == f"reconciler {PROJECT_VERSION} (git 0123456789ab)\n", stamped.stderr
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


def _fires(at: str, alert: str, summary: str, *, severity: str = "", **labels: str) -> dict[str, Any]:
    """A promtool case: `alert` fires at `at` with `labels` (and its severity: critical for the down alerts)."""
    severity = severity or ("critical" if alert.endswith("Down") else "warning")
    expected = {"exp_labels": {"severity": severity, **labels}, "exp_annotations": {"summary": summary}}
    return {"eval_time": at, "alertname": alert, "exp_alerts": [expected]}


def test_the_alerts_fire_for_what_they_name_promtool(tmp_path: Path) -> None:
    (rule,) = [d for d in render("ci", sets=("metrics.prometheusRule.enabled=true",)) if d["kind"] == "PrometheusRule"]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    no_runner = "RunnerGroup {group} has queued jobs but started no runner in 15 minutes"
    failing = "Runners of RunnerGroup {group} fail to register with Gitea (wrong registration token?)"
    lost = "Runners of RunnerGroup {group} died during jobs, which Gitea fails (OOM-killed? a node lost?)"
    passes = (
        "The passes of RunnerGroup ci/stuck keep failing (Redis or the API server unreachable? its status says why)"
    )
    fault = (
        "RunnerGroup ci/odd made the controller raise (validate); only that group stopped: a bug to report, with the"
        " reconciler's log"
    )
    slow = (
        "Jobs of RunnerGroup ci/slow miss the queue-time objective (90% within 30 s): more than 20% waited longer"
        " over the last hour and 5 minutes (at its cap? its status says why)"
    )
    cases = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    # a group that never created a runner: no grs_runners_created_total series at all
                    {"series": 'grs_queued_jobs{group="ci/never"}', "values": "2x40"},
                    {"series": 'grs_active_runners{group="ci/never"}', "values": "0x40"},
                    # a group that serves its queue
                    {"series": 'grs_queued_jobs{group="ci/served"}', "values": "2x40"},
                    {"series": 'grs_runners_created_total{group="ci/served"}', "values": "0+1x40"},
                    {"series": 'grs_active_runners{group="ci/served"}', "values": "1x40"},
                    # a group whose runners fail to register, and one that recovered
                    {"series": 'grs_registration_failures_total{group="ci/badtoken"}', "values": "0+1x40"},
                    {"series": 'grs_registration_failures_total{group="ci/fixed"}', "values": "0+1x40"},
                    {"series": 'grs_jobs_completed_total{group="ci/fixed",conclusion="success"}', "values": "0+1x40"},
                    # a group whose token Gitea refuses: no runner Pod, its creates refused by Gitea
                    {
                        "series": 'grs_runner_creates_refused_total{group="ci/refused",reason="registration"}',
                        "values": "0+1x40",
                    },
                    {"series": 'grs_runner_creates_refused_total{group="ci/quota",reason="quota"}', "values": "0+1x40"},
                    # a group that lost a runner during a job at minute 10, and one that never did
                    {"series": 'grs_runners_lost_total{group="ci/oom"}', "values": "0x10 1x30"},
                    {"series": 'grs_runners_lost_total{group="ci/fine"}', "values": "0x40"},
                    # the reconciler's one target goes down at minute 11; the receivers were never scraped
                    {"series": f'up{{job="{FULL}-reconciler-metrics",namespace="ci"}}', "values": "1x10 0x30"},
                    # Gitea unreachable from the start: no request ever succeeded, so no `ok` series
                    {"series": 'grs_gitea_requests_total{endpoint="jobs",outcome="error"}', "values": "0+3x40"},
                    {"series": 'grs_webhook_signature_failures_total{pod="w-1"}', "values": "0+10x40"},
                    {
                        "series": 'grs_webhook_deliveries_total{event="workflow_job",outcome="redis_unavailable"}',
                        "values": "0x10 0+5x30",
                    },
                    # a group whose passes fail from minute 10 (Redis down), one that failed once
                    {"series": 'grs_reconcile_errors_total{group="ci/stuck",kind="transient"}', "values": "0x9 0+2x30"},
                    {"series": 'grs_reconcile_errors_total{group="ci/blip",kind="transient"}', "values": "0x10 1x30"},
                    # a group whose spec made the controller raise at minute 5
                    {"series": 'grs_group_faults_total{group="ci/odd",stage="validate"}', "values": "0x5 1x35"},
                    # a group half of whose jobs wait past 30 s (the default objective: 90% within 30 s),
                    # and one whose jobs all get a runner within it
                    {"series": 'grs_job_queue_wait_seconds_bucket{group="ci/slow",le="30.0"}', "values": "0+5x40"},
                    {"series": 'grs_job_queue_wait_seconds_count{group="ci/slow"}', "values": "0+10x40"},
                    {"series": 'grs_job_queue_wait_seconds_bucket{group="ci/quick",le="30.0"}', "values": "0+10x40"},
                    {"series": 'grs_job_queue_wait_seconds_count{group="ci/quick"}', "values": "0+10x40"},
                ],
                "alert_rule_test": [
                    {
                        "eval_time": "20m",
                        "alertname": "GiteaRunnerScalerNoRunnersForQueuedJobs",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "group": "ci/never"},
                                "exp_annotations": {"summary": no_runner.format(group="ci/never")},
                            }
                        ],
                    },
                    {
                        "eval_time": "20m",
                        "alertname": "GiteaRunnerScalerRunnersLost",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "group": "ci/oom"},
                                "exp_annotations": {"summary": lost.format(group="ci/oom")},
                            }
                        ],
                    },
                    {"eval_time": "45m", "alertname": "GiteaRunnerScalerRunnersLost", "exp_alerts": []},
                    {
                        "eval_time": "20m",
                        "alertname": "GiteaRunnerScalerRegistrationFailing",
                        "exp_alerts": [
                            {
                                "exp_labels": {"severity": "warning", "group": "ci/badtoken"},
                                "exp_annotations": {"summary": failing.format(group="ci/badtoken")},
                            },
                            {
                                "exp_labels": {"severity": "warning", "group": "ci/refused"},
                                "exp_annotations": {"summary": failing.format(group="ci/refused")},
                            },
                        ],
                    },
                    {"eval_time": "10m", "alertname": "GiteaRunnerScalerReconcilerDown", "exp_alerts": []},
                    {"eval_time": "12m", "alertname": "GiteaRunnerScalerGroupPassesFailing", "exp_alerts": []},
                    _fires("25m", "GiteaRunnerScalerGroupPassesFailing", passes, group="ci/stuck"),
                    _fires("10m", "GiteaRunnerScalerGroupFault", fault, group="ci/odd", stage="validate"),
                    {"eval_time": "25m", "alertname": "GiteaRunnerScalerGroupFault", "exp_alerts": []},
                    _fires(
                        "20m",
                        "GiteaRunnerScalerReconcilerDown",
                        f"No reconciler of ci/{FULL} is up: queued jobs get no runner",
                        namespace="ci",
                    ),
                    _fires(
                        "6m",
                        "GiteaRunnerScalerWebhookReceiverDown",
                        f"No webhook receiver of ci/{FULL} is up: jobs wait for the reconciler's poll",
                        namespace="ci",
                    ),
                    _fires("20m", "GiteaRunnerScalerGiteaUnreachable", "The reconciler cannot poll the Gitea API"),
                    _fires(
                        "20m",
                        "GiteaRunnerScalerWebhookSignatureFailures",
                        "Webhook deliveries are refused for their signature (wrong secret in Gitea?)",
                    ),
                    _fires("20m", "GiteaRunnerScalerQueueTimeObjective", slow, group="ci/slow"),
                    {"eval_time": "10m", "alertname": "GiteaRunnerScalerRedisDown", "exp_alerts": []},
                    _fires(
                        "20m",
                        "GiteaRunnerScalerRedisDown",
                        "The webhook receiver cannot write to Redis and answers 503",
                        severity="critical",
                    ),
                ],
            }
        ],
    }
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    tested = {c["alertname"] for c in cases["tests"][0]["alert_rule_test"] if c["exp_alerts"]}  # type: ignore[index]
    assert tested == alerts, f"alerts with no case that fires them: {alerts - tested}"
    (tmp_path / "cases.yaml").write_text(yaml.safe_dump(cases))
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: tests/setup.sh installs Debian's prometheus package"
    done = subprocess.run([promtool, "test", "rules", "cases.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_queue_time_objective_is_set_in_the_values_on_a_bound_of_the_histogram_it_reads(tmp_path: Path) -> None:
    """The objective's `seconds` are the bounds of grs_job_queue_wait_seconds (the schema refuses others),
    and the alert reads the bucket of the one set, with the share of jobs it may miss."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    rule_values = schema["properties"]["metrics"]["properties"]["prometheusRule"]["properties"]
    assert rule_values["queueTime"]["properties"]["seconds"]["enum"] == [int(b) for b in QUEUE_WAIT_BUCKETS]
    values = tmp_path / "objective.yaml"
    objective = {"enabled": True, "queueTime": {"seconds": 60, "target": 0.95, "burnRate": 2}}
    values.write_text(yaml.safe_dump({"metrics": {"prometheusRule": objective}}))
    (rule,) = [d for d in render("ci", values) if d["kind"] == "PrometheusRule"]
    (alert,) = [r for g in rule["spec"]["groups"] for r in g["rules"] if r["alert"].endswith("QueueTimeObjective")]
    assert alert["expr"].count('grs_job_queue_wait_seconds_bucket{le="60.0"}') == 2, alert["expr"]
    assert alert["expr"].count("> 0.1\n") + alert["expr"].endswith("> 0.1") == 2, alert["expr"]
    assert "(95% within 60 s)" in alert["annotations"]["summary"]


@pytest.mark.parametrize(
    "url",
    ["redis+cluster://r-0.redis:6379,r-1.redis:6379", "rediss+sentinel://s-0.redis:26379,s-1.redis:26379/mymaster/1"],
    ids=["cluster", "sentinel"],
)
def test_an_external_cluster_or_sentinel_url_reaches_both_processes(url: str) -> None:
    sets = ("redis.enabled=false", f"redis.external.url={url.replace(',', chr(92) + ',')}")
    deployments = [d for d in render("ci", sets=sets) if d["kind"] == "Deployment"]
    assert len(deployments) == 2
    assert {_env(d)["GRS_REDIS_URL"] for d in deployments} == {url}


POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
SCHEDULING = {
    "nodeName": "node-of-team-b",
    "nodeSelector": {"team": "b"},
    "affinity": {"nodeAffinity": {}},
    "tolerations": [{"key": "team", "operator": "Exists"}],
    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname"}],
    "schedulerName": "anything-goes",
    "priorityClassName": "system-node-critical",
    "priority": 0,
    "runtimeClassName": "runc-of-team-b",
}


def test_the_runner_pod_policy_refuses_a_runnergroup_asking_beyond_it_when_it_is_applied(kube: KubeCluster) -> None:
    """The chart's ValidatingAdmissionPolicy: `kubectl apply` of a group asking for host namespaces,
    hostPath, a service account or privileged containers is refused with the reconciler's words; a
    group that got in before keeps its metadata updates (the controller's finalizer), not a spec change."""
    ns = namespace(kube)
    groups = f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups"
    merge = "application/merge-patch+json"

    def runner_group(name: str, **pod: Any) -> dict[str, Any]:
        template = {"spec": {"containers": [{"name": "runner"}], **pod}} if pod else None
        return {"apiVersion": "gitea.bpg.pw/v1alpha1", "kind": "RunnerGroup", "metadata": {"name": name},
                "spec": spec_dict(**({"podTemplate": template} if template else {}))}  # fmt: skip

    assert api_request(kube, "POST", groups, runner_group("before", hostPID=True))[0] == 201
    sets = (f"runnerNamespaces={{{ns}}}", "giteaURLs={http://Gitea.invalid:3000/}")
    policy = [d for d in render(ns, sets=sets) if d["kind"] in POLICY_KINDS]
    assert [d["kind"] for d in policy] == list(POLICY_KINDS)
    for doc in policy:  # names of this test's own: another test may have applied the chart's
        doc["metadata"]["name"] += f"-{ns}"
    policy[1]["spec"]["policyName"] = policy[0]["metadata"]["name"]
    try:
        for doc in policy:
            apply(kube, doc, ns)
        tries = iter(range(1000))  # a new name each try: one created before the policy took effect stays

        def refused_now() -> Any:
            r = api_request(kube, "POST", groups, runner_group(f"h{next(tries)}", hostPID=True))
            return r[0] == 422 and r

        refused = wait_for(refused_now, timeout=30, what="the policy in effect")
        assert "runner Pod policy: spec.podTemplate.spec.hostPID, hostIPC, hostNetwork" in refused[1]["message"]
        asks: list[tuple[str, dict[str, Any], str]] = [
            ("p", {"volumes": [{"name": "s", "hostPath": {"path": "/"}}]}, "allowHostPath"),
            ("a", {"serviceAccountName": "deployer"}, "allowServiceAccount"),
            ("c", {"containers": [{"name": "helper", "securityContext": {"privileged": True}}]}, "allowPrivileged"),
        ]
        for name, pod, said in asks:
            status, body = api_request(kube, "POST", groups, runner_group(name, **pod))
            assert status == 422 and f"(runnerPodPolicy.{said})" in body["message"], body
        # Placement is the admin's: each scheduling field is refused; an empty one asks nothing.
        for i, (key, value) in enumerate(SCHEDULING.items()):
            status, body = api_request(kube, "POST", groups, runner_group(f"place{i}", **{key: value}))
            assert status == 422 and "(runnerPodPolicy.allowScheduling)" in body["message"], (key, body)
        assert api_request(kube, "POST", groups, runner_group("plain", nodeSelector={}, tolerations=[]))[0] == 201
        # The shapes other tools' habits write are refused when applied, saying what the shape is.
        shapes: list[dict[str, Any]] = [
            {"containers": [{"name": "runner", "env": ["FOO=bar"]}]},
            {"imagePullSecrets": ["regcred"]},
        ]
        for i, shape in enumerate(shapes):
            status, body = api_request(kube, "POST", groups, runner_group(f"shape{i}", **shape))
            assert status == 422 and "env: [{name: FOO, value: bar}]" in body["message"], body
        # A Gitea the install does not serve is refused; the one it serves, written another way, is not.
        elsewhere = runner_group("elsewhere")
        elsewhere["spec"]["gitea"] = {"url": "https://gitea.invalid.attacker.example"}
        status, body = api_request(kube, "POST", groups, elsewhere)
        assert status == 422 and "spec.gitea.url is not a Gitea this install serves (giteaURLs)" in body["message"]
        same = runner_group("same")
        same["spec"]["gitea"] = {"url": "http://gitea.invalid:3000/"}
        assert api_request(kube, "POST", groups, same)[0] == 201
        # gitea-runner-operator's form (spec.giteaURL) is read the same way.
        operator = runner_group("operator")
        operator["spec"]["giteaURL"] = operator["spec"].pop("gitea")["url"]
        assert api_request(kube, "POST", groups, operator)[0] == 201
        operator = runner_group("operator-elsewhere")
        operator["spec"].pop("gitea")
        operator["spec"]["giteaURL"] = "https://attacker.example.net"
        assert api_request(kube, "POST", groups, operator)[0] == 422
        # The default (dind) image's runner container may say privileged itself: its Docker mode.
        dind = runner_group("dind", containers=[{"name": "runner", "securityContext": {"privileged": True}}])
        assert api_request(kube, "POST", groups, dind)[0] == 201
        finalizer = {"metadata": {"finalizers": ["example.com/held"]}}
        assert api_request(kube, "PATCH", f"{groups}/before", finalizer, content_type=merge)[0] == 200
        bigger = {"spec": {"maxActiveRunners": 9}}
        assert api_request(kube, "PATCH", f"{groups}/before", bigger, content_type=merge)[0] == 422
    finally:
        for doc in policy:
            plural = doc["kind"].lower() + "s"
            api_request(kube, "DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}")
        api_request(kube, "PATCH", f"{groups}/before", {"metadata": {"finalizers": None}}, content_type=merge)


def test_the_admission_policy_refuses_a_runnergroup_serving_an_owner_its_namespace_is_not_pinned_to(
    kube: KubeCluster,
) -> None:
    """namespaceOwners when applied, in the reconciler's words: a group serves only the Gitea owners its
    namespace is pinned to (case-insensitively; a repository's owner, gitea-runner-operator's bare repo
    name under its org), global only where the pin says "*", and nothing in a namespace not named."""
    pinned, unnamed, open_ = namespace(kube), namespace(kube), namespace(kube)
    sets = (f"runnerNamespaces={{{pinned},{unnamed},{open_}}}", f"namespaceOwners.{pinned}={{Acme,bob}}",
            f"namespaceOwners.{open_}={{*}}", *(f"runnerPodPolicy.{a}=true" for a in ALLOWS))  # fmt: skip
    policy = [d for d in render(pinned, sets=sets) if d["kind"] in POLICY_KINDS]
    assert [d["kind"] for d in policy] == list(POLICY_KINDS), "rendered for the pins alone"
    for doc in policy:  # names of this test's own: another test may have applied the chart's
        doc["metadata"]["name"] += f"-{pinned}"
    policy[1]["spec"]["policyName"] = policy[0]["metadata"]["name"]

    def post(ns: str, **scope: Any) -> tuple[int, str]:
        spec = {k: v for k, v in spec_dict(**scope).items() if v is not None}
        body = {"apiVersion": "gitea.bpg.pw/v1alpha1", "kind": "RunnerGroup",
                "metadata": {"generateName": "g-"}, "spec": spec}  # fmt: skip
        status, answer = api_request(kube, "POST", f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{ns}/runnergroups", body)
        return status, answer.get("message", "")

    try:
        for doc in policy:
            apply(kube, doc, pinned)
        wait_for(lambda: post(pinned, org="other")[0] == 422, timeout=30, what="the policy in effect")
        only = f": namespace {pinned} may serve only the Gitea owners acme, bob (namespaceOwners)"
        refused: list[tuple[dict[str, Any], str]] = [
            ({"org": "other"}, f"spec.org other{only}"),
            ({"scope": "user", "org": None, "user": "mallory"}, f"spec.user mallory{only}"),
            ({"scope": "repo", "org": None, "repo": "other/widgets"}, f"spec.repo other/widgets{only}"),
            ({"scope": "repo", "org": "other", "repo": "widgets"}, f"spec.repo widgets{only}"),
            ({"scope": "global", "org": None}, f"spec.scope global (every owner){only}"),
        ]
        for scope, said in refused:
            status, message = post(pinned, **scope)
            assert status == 422 and f"not allowed by the install's policy: {said}" in message, (scope, message)
        served: list[dict[str, Any]] = [
            {},
            {"org": "ACME"},
            {"scope": "user", "org": None, "user": "Bob"},
            {"scope": "repo", "org": None, "repo": "acme/widgets"},
            {"scope": "repo", "repo": "widgets"},  # gitea-runner-operator's form: a bare name under spec.org
        ]
        for scope in served:
            assert post(pinned, **scope)[0] == 201, scope
        status, message = post(unnamed)
        assert status == 422 and f"namespace {unnamed} may serve no Gitea owner: namespaceOwners does not" in message
        assert post(open_, scope="global", org=None)[0] == post(open_, org="anyone")[0] == 201
    finally:
        for doc in policy:
            plural = doc["kind"].lower() + "s"
            api_request(kube, "DELETE", f"/apis/admissionregistration.k8s.io/v1/{plural}/{doc['metadata']['name']}")


ALLOWS = ("allowHostNamespaces", "allowHostPath", "allowServiceAccount", "allowPrivileged", "allowScheduling")
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


def test_one_release_name_in_two_namespaces_shares_no_cluster_scoped_object() -> None:
    """Cluster-scoped objects (the reconciler's ClusterRole, the hook's, the admission policy) carry the
    release's namespace in their names, so two teams may each install `grs` in their own namespace
    without one taking over the other's objects. The CRD is shared by design."""
    names: dict[str, set[tuple[str, str]]] = {}
    for ns in ("team-a", "team-b"):
        docs = render(ns, CHART / "ci" / "full-values.yaml")
        names[ns] = {(d["kind"], d["metadata"]["name"]) for d in docs if d["kind"] in CLUSTER_SCOPED}
    assert {kind for kind, _ in names["team-a"]} == set(CLUSTER_SCOPED), names
    assert not names["team-a"] & names["team-b"], names["team-a"] & names["team-b"]


def _check_pod(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (pod,) = [d for d in docs if d["kind"] == "Pod"]
    return pod


@pytest.mark.parametrize("values", [(), (CHART / "ci" / "full-values.yaml",)], ids=["defaults", "full"])
def test_helm_test_runs_reconciler_check_hardened_under_the_reconcilers_account_and_its_rbac(
    kube: KubeCluster, tmp_path: Path, values: tuple[Path, ...]
) -> None:
    """`helm test`'s Pod: `reconciler check --wait 60` in the chart's image, as hardened as the chart's other
    Pods, under the reconciler's ServiceAccount serving the reconciler's namespaces, deleted before the next
    test; and that account's RBAC (nothing added) lets the command list the groups it reports."""
    ns = f"check-{uuid.uuid4().hex[:6]}"
    docs = render(ns, *values)
    pod = _check_pod(docs)
    reconciler = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == RECONCILER)
    assert pod["metadata"]["annotations"] == {
        **pod["metadata"]["annotations"],
        "helm.sh/hook": "test",
        "helm.sh/hook-delete-policy": "before-hook-creation",
    }
    spec, served = pod["spec"], reconciler["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == served["serviceAccountName"] and spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    assert container["command"] == ["reconciler", "check", "--wait", "60"]
    assert container["image"] == served["containers"][0]["image"]
    assert container["env"] == [{"name": "GRS_WATCH_NAMESPACE", "value": _env(reconciler)["GRS_WATCH_NAMESPACE"]}]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"] == served["containers"][0]["securityContext"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["limits"]["memory"]
    assert _hook(pod)  # never part of the release itself
    if values:
        return  # the full values' namespaces are not this test's: the defaults' install is run below
    assert api_request(kube, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
    for doc in docs:
        if not _hook(doc):
            apply(kube, doc, ns)
    token = sa_token(kube, ns, spec["serviceAccountName"])
    kubeconfig = kube.write_kubeconfig_for(tmp_path / "sa", token=token)
    environ = {"PATH": os.environ["PATH"], "GRS_KUBECONFIG": str(kubeconfig)}
    environ |= {e["name"]: e["value"] for e in container["env"]}

    def helm_test() -> subprocess.CompletedProcess[str]:
        argv = [str(COMMAND), *container["command"][1:2], "--wait", "0"]  # the Pod's command, without the wait
        return subprocess.run(argv, capture_output=True, text=True, env=environ, timeout=60, check=False)

    done = helm_test()
    nothing = f"no RunnerGroup in namespace(s) {ns}: create one (docs/runnergroups.md)\n"
    assert (done.returncode, done.stdout) == (1, nothing), done.stderr
    assert api_request(kube, "POST", RG.format(ns=ns), group("runners"))[0] == 201
    write_status(kube, ns, "runners", served_status())
    done = helm_test()
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert done.stdout.splitlines()[0].startswith(f"{ns}/runners: Gitea ") and token not in done.stdout + done.stderr
