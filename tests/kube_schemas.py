"""JSON schemas for kubeconform, taken from a real kube-apiserver's OpenAPI and from our CRD.

kubeconform normally downloads them; here they come from the API server the tests run, so they are
exactly the schemas of the Kubernetes version the chart is applied to. Strict: unknown fields fail.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.kube_cluster import KubeCluster, api_request


def _strict(node: Any) -> Any:
    if isinstance(node, dict):
        # YAML writes these as numbers or strings; OpenAPI says string with a format.
        if node.get("format") == "int-or-string" or node.get("x-kubernetes-int-or-string") is True:
            return {"oneOf": [{"type": "string"}, {"type": "integer"}]}
        if str(node.get("description", "")).startswith("Quantity is a fixed-point representation"):
            return {"oneOf": [{"type": "string"}, {"type": "number"}]}
        out = {k: _strict(v) for k, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(v) for v in node]
    return node


def _suffix(group: str, version: str) -> str:
    return f"-{group.split('.')[0]}-{version}".lower() if group else f"-{version}"


def write_schemas(cluster: KubeCluster, folder: Path, *, crds: list[dict[str, Any]]) -> Path:
    """Write `<kind>-<group>-<version>.json` files for every built-in kind and the CRDs; return the folder."""
    status, spec = api_request(cluster, "GET", "/openapi/v2")
    assert status == 200, spec
    folder.mkdir(parents=True, exist_ok=True)
    definitions = _strict(spec["definitions"])
    (folder / "_definitions.json").write_text(json.dumps({"definitions": definitions}))
    for name, definition in spec["definitions"].items():
        for gvk in definition.get("x-kubernetes-group-version-kind") or []:
            path = folder / f"{gvk['kind'].lower()}{_suffix(gvk['group'], gvk['version'])}.json"
            path.write_text(json.dumps({"$ref": f"_definitions.json#/definitions/{name}"}))
    for crd in crds:
        spec_ = crd["spec"]
        for version in spec_["versions"]:
            schema = _strict(version["schema"]["openAPIV3Schema"])
            schema["properties"]["metadata"] = {"type": "object"}
            path = folder / f"{spec_['names']['kind'].lower()}{_suffix(spec_['group'], version['name'])}.json"
            path.write_text(json.dumps(schema))
    return folder
