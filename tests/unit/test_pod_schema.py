"""A podTemplate's shape, held to the PodTemplateSpec schema of the API server (the one the package ships,
read from Kubernetes 1.36; `test_reconciler` checks it is what the test API server serves)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconciler.kube.openapi import shipped_pod_schema
from reconciler.kube.pod_schema import PodSchema

ROOT = Path(__file__).resolve().parent.parent.parent
SCHEMA = shipped_pod_schema()


def pod(**fields: Any) -> dict[str, Any]:
    return {"spec": fields}


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        pytest.param(
            pod(containers=[{"name": "runner", "env": ["FOO=bar"]}]),
            "spec.podTemplate.spec.containers[0].env[0]: expected an object, got a string 'FOO=bar'",
            id="compose-env",
        ),
        pytest.param(
            pod(containers=[{"name": "runner", "evn": []}]),
            "spec.podTemplate.spec.containers[0]: unknown field 'evn' (did you mean 'env'?)",
            id="typo",
        ),
        pytest.param(
            pod(containers=[{"name": "runner", "resources": {"limits": {"cpu": [2]}}}]),
            "spec.podTemplate.spec.containers[0].resources.limits.cpu: expected a number or a string, got a list",
            id="quantity-list",
        ),
        pytest.param(
            pod(securityContext={"runAsUser": "1000"}),
            "spec.podTemplate.spec.securityContext.runAsUser: expected an integer, got a string '1000'",
            id="uid-string",
        ),
        pytest.param(
            pod(hostNetwork="yes"),
            "spec.podTemplate.spec.hostNetwork: expected a boolean, got a string 'yes'",
            id="bool-string",
        ),
        pytest.param(
            pod(securityContext={"runAsUser": True}),
            "spec.podTemplate.spec.securityContext.runAsUser: expected an integer, got a boolean True",
            id="bool-for-integer",
        ),
        pytest.param(
            {"metadata": {"labels": {"team": 7}}},
            "spec.podTemplate.metadata.labels.team: expected a string, got a number 7",
            id="label-number",
        ),
        pytest.param(
            pod(volumes=[{"name": "x", "emptyDir": None}, None]),
            "spec.podTemplate.spec.volumes[1]: expected a value, got null",
            id="null-item",
        ),
        pytest.param({"spce": {}}, "spec.podTemplate: unknown field 'spce' (did you mean 'spec'?)", id="top-typo"),
    ],
)
def test_a_wrong_shape_is_named_by_its_path_in_the_groups_terms(template: Any, problem: str) -> None:
    assert SCHEMA.problems(template) == [problem]


def test_what_kubernetes_takes_passes_numbers_for_quantities_and_ports_included() -> None:
    template = {
        "metadata": {"labels": {"team": "a"}, "annotations": {"x": "y"}},
        "spec": {
            "containers": [
                {
                    "name": "runner",
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}],
                    "resources": {"limits": {"cpu": 2, "memory": "4Gi"}, "requests": {"cpu": 0.5}},
                    "ports": [{"containerPort": 8080, "name": "http"}],
                    "readinessProbe": {"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 5},
                    "livenessProbe": {"tcpSocket": {"port": 8080}},
                    "securityContext": {"runAsUser": 1000, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "work", "mountPath": "/w"}],
                }
            ],
            "volumes": [{"name": "work", "emptyDir": {"sizeLimit": "1Gi"}}, {"name": "n", "emptyDir": None}],
            "tolerations": [{"key": "ci", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 10}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "dnsConfig": {"options": [{"name": "ndots", "value": "2"}]},
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "DoNotSchedule"}],
        },
    }
    assert SCHEMA.problems(template) == []


def _documented_templates() -> list[Any]:
    """Every podTemplate of a RunnerGroup in the examples and the docs' YAML blocks."""
    texts = [p.read_text() for p in sorted((ROOT / "deploy" / "examples").glob("*.yaml"))]
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        texts += re.findall(r"```yaml\n(.*?)```", page.read_text(), flags=re.S)
    out = []
    for text in texts:
        try:
            documents = list(yaml.safe_load_all(text))
        except yaml.YAMLError:
            continue  # a fragment with placeholders
        for doc in documents:
            if isinstance(doc, dict) and doc.get("kind") == "RunnerGroup" and "podTemplate" in doc.get("spec", {}):
                out.append(doc["spec"]["podTemplate"])
    return out


def test_every_podtemplate_the_docs_and_examples_show_passes() -> None:
    templates = _documented_templates()
    assert templates, "no podTemplate found in the docs or the examples"
    for template in templates:
        assert SCHEMA.problems(template) == [], template


def test_a_shipped_schema_refers_only_to_schemas_it_holds() -> None:
    refs = {m for m in re.findall(r"#/components/schemas/([\w.]+)", str(SCHEMA.schemas))}
    assert refs <= set(SCHEMA.schemas)
    assert isinstance(SCHEMA, PodSchema) and "io.k8s.api.core.v1.PodSpec" in SCHEMA.schemas
