"""RunnerGroup specs for tests: one valid base that each test changes as it needs."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.model.spec import RunnerGroupSpec


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


def operator_form(**changes: Any) -> dict[str, Any]:
    """The same group as gitea-runner-operator (bapung) wrote it: `giteaURL`, a bare repo name under `org`,
    Secret references without `secretRef`."""
    base: dict[str, Any] = {
        "giteaURL": "http://gitea.invalid:3000",
        "scope": "repo",
        "org": "acme",
        "repo": "widgets",
        "labels": ["k8s"],
        "maxActiveRunners": 3,
        "authToken": {"name": "gitea", "key": "api"},
        "registrationToken": {"name": "gitea", "key": "reg", "optional": False},
    }
    return base | changes


# Specs both the CRD schema (the API server) and the model refuse, and the words each must say.
REFUSED = [
    pytest.param({"scope": "org", "org": None}, "spec.org is required", id="org-scope-without-org"),
    pytest.param({"scope": "repo", "repo": None}, "spec.repo is required", id="repo-scope-without-repo"),
    pytest.param({"maxActiveRunners": 0}, "maxActiveRunners", id="max-zero"),
    pytest.param({"scope": "team"}, "scope", id="unknown-scope"),
    pytest.param({"repo": "no-slash", "scope": "repo", "org": None}, "spec.repo is owner/name", id="repo-no-owner"),
    pytest.param({"minIdleRunners": 5}, "minIdleRunners must not exceed", id="min-idle-above-max"),
    pytest.param({"fetchInterval": "0m0s"}, "fetchInterval must be at least 1s", id="fetch-interval-zero"),
    pytest.param({"gitea": {"url": "ftp://x"}}, "url", id="bad-url"),
    pytest.param({"gitea": {"url": "https://gitea.example.com:abc"}}, "url", id="url-port-not-a-number"),
    pytest.param({"gitea": {"url": "https://ci:hunter2@gitea.example.com"}}, "url", id="url-with-a-password"),
    pytest.param({"registrationToken": {"secretRef": {"name": "x"}}}, "key", id="secret-ref-without-key"),
    pytest.param({"gitea": None}, "set spec.gitea.url", id="no-gitea-url"),
    pytest.param({"giteaURL": "http://gitea.invalid:3000"}, "not both", id="gitea-url-twice"),
    pytest.param({"authToken": {"name": "gitea", "key": "api", "optional": True}}, "cannot be optional", id="optional"),
    pytest.param({"authToken": {"key": "api"}}, "name and key", id="flat-without-name"),
    pytest.param(
        {"authToken": {"name": "gitea", "key": "api", "secretRef": {"name": "gitea", "key": "api"}}},
        "name and key alone",
        id="flat-and-secret-ref",
    ),
    pytest.param({"dindArgs": ["--mtu=1400"]}, "needs containerMode dind", id="dind-args-without-dind"),
    pytest.param(
        {"containerMode": "dind", "dindArgs": ["--host=tcp://0.0.0.0:2375"]},
        "cannot set --host",
        id="dind-args-host",
    ),
    pytest.param({"containerMode": "dind", "dindArgs": ["-H", "x"]}, "dindArgs", id="dind-args-not-a-flag"),
]


def changed(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` applied, a None removing the key."""
    out = dict(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out
