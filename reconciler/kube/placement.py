"""Pure: where runner Pods may run, as the install's admin says (`GRS_RUNNER_PLACEMENT`).

A RunnerGroup's `podTemplate` may not place its runners (the runner Pod policy refuses its scheduling
fields unless `GRS_RUNNER_POD_ALLOW_SCHEDULING`); the admin does, with a nodeSelector and tolerations
for the whole install (`default`) and for each namespace (`namespaces`, each field it sets instead of
the default's). `manifests` puts them over every runner Pod's spec: the admin's nodeSelector keys win
over the podTemplate's, the admin's tolerations are added to its. They are part of the runner
template's hash, so changing them replaces idle runners. Owns the setting's JSON shape (the chart's
`runnerPlacement` value, as is) and its checks. Must not do I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

SETTING = "GRS_RUNNER_PLACEMENT"
_TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
_OPERATORS = ("Equal", "Exists")
_EFFECTS = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Nodes:
    """A nodeSelector and tolerations for runner Pods; None: not set (a namespace's: the default's)."""

    node_selector: Mapping[str, str] | None = None
    tolerations: tuple[Mapping[str, Any], ...] | None = None

    def __bool__(self) -> bool:
        return bool(self.node_selector or self.tolerations)

    @property
    def digest(self) -> str:
        """A short digest of what runner Pods get ("" when they get nothing), for the template hash."""
        if not self:
            return ""
        text = json.dumps([self.node_selector or {}, list(self.tolerations or ())], sort_keys=True)
        return "|nodes=" + hashlib.sha256(text.encode()).hexdigest()[:16]

    def apply(self, pod: dict[str, Any]) -> None:
        """Put these over the Pod spec `pod`: the nodeSelector's keys win over its own, the tolerations
        are added to its own."""
        if self.node_selector:
            own = pod.get("nodeSelector")
            pod["nodeSelector"] = {**(own if isinstance(own, dict) else {}), **self.node_selector}
        if self.tolerations:
            own = pod.get("tolerations")
            kept = [t for t in (own if isinstance(own, list) else []) if t not in self.tolerations]
            pod["tolerations"] = [*kept, *(dict(t) for t in self.tolerations)]


ANY_NODE = Nodes()  # no placement of the admin's: the podTemplate's own, or the scheduler's choice


@dataclass(frozen=True, slots=True)
class Placement:
    """The admin's placement of runner Pods: the install's `default`, and each namespace's own."""

    default: Nodes = ANY_NODE
    namespaces: Mapping[str, Nodes] = field(default_factory=dict)

    def of(self, namespace: str) -> Nodes:
        """The placement of the runner Pods of `namespace`: each field its entry sets, else the default's."""
        own = self.namespaces.get(namespace, ANY_NODE)
        selector = own.node_selector if own.node_selector is not None else self.default.node_selector
        tolerations = own.tolerations if own.tolerations is not None else self.default.tolerations
        return Nodes(node_selector=dict(selector or {}), tolerations=tuple(tolerations or ()))

    @classmethod
    def parse(cls, text: str) -> Placement:
        """From the setting's JSON ("" for none): {"default": NODES, "namespaces": {ns: NODES}}, NODES being
        {"nodeSelector": {label: value}, "tolerations": [toleration]}. Raises ValueError saying what is wrong."""
        if not text.strip():
            return cls()
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"{SETTING} is not JSON: {exc}") from None
        data = _object(data, {"default", "namespaces"}, SETTING)
        namespaces = _object(data.get("namespaces") or {}, None, f"{SETTING} namespaces")
        return cls(
            default=_nodes(data.get("default"), f"{SETTING} default"),
            namespaces={str(ns): _nodes(entry, f"{SETTING} namespaces.{ns}") for ns, entry in namespaces.items()},
        )


def _object(value: object, allowed: set[str] | None, where: str) -> dict[str, Any]:
    """`value`, if it is an object (of only the `allowed` keys, if given); else raise saying so."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object")
    unknown = sorted(set(value) - allowed) if allowed is not None else []
    if unknown:
        raise ValueError(f"{where} has unknown keys {', '.join(unknown)} (allowed: {', '.join(sorted(allowed or ()))})")
    return value


def _nodes(value: object, where: str) -> Nodes:
    """One entry: its nodeSelector (label: value strings) and tolerations (Kubernetes tolerations)."""
    if value is None:
        return ANY_NODE
    value = _object(value, {"nodeSelector", "tolerations"}, where)
    selector, tolerations = value.get("nodeSelector"), value.get("tolerations")
    if selector is not None:
        selector = _object(selector, None, f"{where}.nodeSelector")
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in selector.items()):
            raise ValueError(f"{where}.nodeSelector maps node labels to values, both strings")
    if tolerations is not None:
        if not isinstance(tolerations, list):
            raise ValueError(f"{where}.tolerations must be a list of tolerations")
        for i, toleration in enumerate(tolerations):
            _toleration(toleration, f"{where}.tolerations[{i}]")
    return Nodes(
        node_selector=None if selector is None else dict(selector),
        tolerations=None if tolerations is None else tuple(tolerations),
    )


def _toleration(value: object, where: str) -> None:
    """Raise unless `value` is a toleration of the Kubernetes Pod API."""
    value = _object(value, set(_TOLERATION_KEYS), where)
    if value.get("operator", "Equal") not in _OPERATORS:
        raise ValueError(f"{where}.operator must be one of {', '.join(_OPERATORS)}")
    if value.get("effect", "") not in _EFFECTS:
        raise ValueError(f"{where}.effect must be one of {', '.join(e for e in _EFFECTS if e)} (or none)")
    if not all(isinstance(value.get(k, ""), str) for k in ("key", "value")):
        raise ValueError(f"{where}: key and value are strings")
    seconds = value.get("tolerationSeconds")
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int)):
        raise ValueError(f"{where}.tolerationSeconds must be a whole number")


UNPINNED = Placement()  # no placement of the admin's anywhere
