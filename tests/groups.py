"""RunnerGroup specs for tests: one valid base that each test changes as it needs."""

from __future__ import annotations

from typing import Any

from reconciler.crd import RunnerGroupSpec


def spec_dict(**changes: Any) -> dict[str, Any]:
    """A valid RunnerGroup spec (org acme, labels k8s, max 3) with `changes` applied."""
    base: dict[str, Any] = {
        "scope": "org",
        "org": "acme",
        "gitea": {"url": "http://gitea.invalid:3000"},
        "labels": ["k8s"],
        "maxActiveRunners": 3,
        "registrationToken": {"secretRef": {"name": "gitea", "key": "reg"}},
        "authToken": {"secretRef": {"name": "gitea", "key": "api"}},
    }
    return base | changes


def spec(**changes: Any) -> RunnerGroupSpec:
    """The same, validated."""
    return RunnerGroupSpec.model_validate(spec_dict(**changes))
