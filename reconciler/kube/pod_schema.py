"""Pure: a RunnerGroup's `podTemplate` held to the API server's own schema of a PodTemplateSpec.

The CRD keeps `spec.podTemplate` open (`x-kubernetes-preserve-unknown-fields`), so the API server
stores any shape there, and the controller merges it into every runner Pod. This module checks it
against the PodTemplateSpec schema the cluster's API server serves (OpenAPI v3, `/openapi/v3/api/v1`,
read by `openapi`): every key known to Kubernetes, every value of its type, lists of objects made of
objects. It names the wrong paths in the RunnerGroup's terms (`spec.podTemplate.spec.containers[0].env[0]`)
and a near key for a typo. Required fields are not checked: the runner container's name and image come
from the group, and the API server says the rest when the runner Job is created. Must not do I/O.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

ROOT = "io.k8s.api.core.v1.PodTemplateSpec"
_REF = "#/components/schemas/"
_NUMBER_OR_STRING = ("io.k8s.apimachinery.pkg.api.resource.Quantity", "io.k8s.apimachinery.pkg.util.intstr.IntOrString")
_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}
WHERE = "spec.podTemplate"
_INT_OR_STRING = "int-or-string"
_KEPT = frozenset({"type", "$ref", "format", "x-kubernetes-int-or-string", "additionalProperties"})


@dataclass(frozen=True, slots=True)
class PodSchema:
    """The schemas a PodTemplateSpec is made of, by name (OpenAPI v3 `components.schemas`)."""

    schemas: Mapping[str, Mapping[str, Any]]

    @classmethod
    def from_openapi(cls, document: Mapping[str, Any]) -> PodSchema:
        """Keep, of an OpenAPI v3 document, the schemas a PodTemplateSpec reaches; KeyError if it has none."""
        every = document["components"]["schemas"]
        kept: dict[str, Mapping[str, Any]] = {}
        todo = [ROOT]
        while todo:
            name = todo.pop()
            if name not in kept:
                kept[name] = _structural(every[name])
                todo.extend(_refs(kept[name]))
        return cls(kept)

    def problems(self, template: object, *, limit: int = 5) -> list[str]:
        """What is wrong with the shape of `template` (a podTemplate), at most `limit` messages ([] if nothing)."""
        out: list[str] = []
        for problem in self._check(template, {"$ref": _REF + ROOT}, WHERE):
            out.append(problem)
            if len(out) >= limit:
                break
        return out

    def _resolve(self, schema: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]]:
        """(the schema's name if it is a reference, the schema itself)."""
        name = ""
        while True:
            ref = schema.get("$ref") or next((s["$ref"] for s in schema.get("allOf") or () if "$ref" in s), None)
            if ref is None:
                return name, schema
            name = ref.removeprefix(_REF)
            schema = self.schemas[name]

    def _check(self, value: object, schema: Mapping[str, Any], path: str) -> Iterator[str]:
        name, schema = self._resolve(schema)
        if value is None:
            return  # an unset field, as the API server reads null
        if (
            name in _NUMBER_OR_STRING
            or schema.get("x-kubernetes-int-or-string")
            or schema.get("format") == "int-or-string"
        ):
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                yield f"{path}: expected a number or a string, got {_shown(value)}"
            return
        kind = schema.get("type") or ("object" if "properties" in schema or "additionalProperties" in schema else "")
        if kind == "object":
            yield from self._object(value, schema, path)
        elif kind == "array":
            yield from self._array(value, schema, path)
        elif kind in _TYPES and (isinstance(value, bool) != (kind == "boolean") or not isinstance(value, _TYPES[kind])):
            yield f"{path}: expected {'an' if kind == 'integer' else 'a'} {kind}, got {_shown(value)}"

    def _object(self, value: object, schema: Mapping[str, Any], path: str) -> Iterator[str]:
        if not isinstance(value, dict):
            yield f"{path}: expected an object, got {_shown(value)}"
            return
        properties: Mapping[str, Any] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                yield from self._check(item, properties[key], f"{path}.{key}")
            elif isinstance(extra, Mapping):
                yield from self._check(item, extra, f"{path}.{key}")
            elif extra is not True:
                near = difflib.get_close_matches(str(key), list(properties), n=1)
                yield f"{path}: unknown field {key!r}" + (f" (did you mean {near[0]!r}?)" if near else "")

    def _array(self, value: object, schema: Mapping[str, Any], path: str) -> Iterator[str]:
        if not isinstance(value, list):
            yield f"{path}: expected a list, got {_shown(value)}"
            return
        items = schema.get("items") or {}
        for i, item in enumerate(value):
            if item is None:
                yield f"{path}[{i}]: expected a value, got null"
            else:
                yield from self._check(item, items, f"{path}[{i}]")


def _structural(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A schema with only what `problems` reads (no descriptions, defaults, list and patch hints)."""
    out: dict[str, Any] = {k: v for k, v in schema.items() if k in _KEPT}
    if isinstance(schema.get("properties"), Mapping):
        out["properties"] = {k: _structural(v) for k, v in schema["properties"].items()}
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), Mapping):
            out[key] = _structural(schema[key])
    if isinstance(schema.get("allOf"), list):
        out["allOf"] = [_structural(s) for s in schema["allOf"] if isinstance(s, Mapping)]
    return out


def _refs(node: object) -> Iterator[str]:
    """The schema names `node` refers to, at any depth."""
    if isinstance(node, Mapping):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF):
            yield ref.removeprefix(_REF)
        for item in node.values():
            yield from _refs(item)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _shown(value: object) -> str:
    """A wrong value in a message: its kind, and a short form of it."""
    kinds = {str: "a string", bool: "a boolean", int: "a number", float: "a number", list: "a list", dict: "an object"}
    text = repr(value) if not isinstance(value, dict | list) else ""
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{kinds.get(type(value), type(value).__name__)} {text}".rstrip()
