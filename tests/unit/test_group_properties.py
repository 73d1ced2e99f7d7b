"""Property: whatever a RunnerGroup author writes that the CRD schema admits (odd URLs, any shape inside
the podTemplate, which the CRD keeps open), one group's path through the controller (validate, plan,
the runner Job's manifest, the status) never raises: a spec is either refused with a message or served."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reconciler.decide.plan import plan
from reconciler.decide.status import desired_status
from reconciler.kube.manifests import GroupRef, build_job, template_hash
from reconciler.kube.openapi import shipped_pod_schema
from reconciler.kube.runner_policy import RunnerPolicy
from reconciler.loop.rounds.group_views import validate
from reconciler.model.spec import GITEA_URL_PATTERN
from tests.groups import spec_dict

JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
NAMES = st.sampled_from(["runner", "docker", "sidecar", "prepare", ""])
SECRET = st.sampled_from(["regcred", "gitea-runner-scaler-webhook", ""])


def shaped(shape: Any) -> st.SearchStrategy[Any]:
    """Values of `shape` (a dict of field -> shape, a one-item list, or a strategy), mostly right, sometimes
    anything at all: the wrong shapes habits of other tools write (`env: ["FOO=bar"]`)."""
    if isinstance(shape, dict):
        right: st.SearchStrategy[Any] = st.fixed_dictionaries({}, optional={k: shaped(v) for k, v in shape.items()})
    elif isinstance(shape, list):
        right = st.lists(shaped(shape[0]), max_size=3)
    else:
        right = shape
    return st.one_of(right, right, right, right, JUNK)


REF = {"name": SECRET, "key": st.text(max_size=4)}
CONTAINER = {
    "name": NAMES,
    "image": st.text(max_size=8),
    "env": [{"name": st.text(max_size=6), "value": st.text(max_size=6), "valueFrom": {"secretKeyRef": REF}}],
    "envFrom": [{"secretRef": {"name": SECRET}, "configMapRef": {"name": SECRET}}],
    "securityContext": {"privileged": st.booleans(), "capabilities": {"add": [st.text(max_size=8)]}},
    "resources": {"limits": {"cpu": st.text(max_size=4) | st.integers(0, 8)}},
    "volumeMounts": [{"name": st.text(max_size=4), "mountPath": st.text(max_size=8)}],
}
VOLUME = {
    "name": st.text(max_size=4),
    "secret": {"secretName": SECRET},
    "hostPath": {"path": st.text(max_size=8)},
    "projected": {"sources": [{"secret": {"name": SECRET}, "serviceAccountToken": {"path": st.text(max_size=4)}}]},
    "emptyDir": {"medium": st.text(max_size=4)},
}
POD = {
    "containers": [CONTAINER],
    "initContainers": [CONTAINER],
    "volumes": [VOLUME],
    "imagePullSecrets": [{"name": SECRET}],
    "hostNetwork": st.booleans(),
    "serviceAccountName": st.text(max_size=6),
    "nodeSelector": st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2),
}
TEMPLATE = shaped({"metadata": {"labels": st.dictionaries(st.text(max_size=4), st.text(max_size=4))}, "spec": POD})
URLS = st.from_regex(GITEA_URL_PATTERN, fullmatch=True) | st.sampled_from(
    ["https://gitea.example.com:abc", "http://g:99999", "http://[::1]:0", "https://g/x y", "http://g:3000/sub/"]
)
POLICY = RunnerPolicy(secret_names=frozenset({"gitea-runner-scaler-webhook"}))
GROUP = GroupRef(namespace="ci", name="builders", uid="uid-1")
NOW = datetime(2026, 11, 27, tzinfo=UTC)


def one_group(raw: dict[str, Any], schema: Any) -> None:
    """One group's path, as the controller takes it."""
    valid, problem = validate(raw, POLICY, schema)
    if valid is None:
        assert problem, "a refused spec says why"
        return
    build_job(GROUP, valid, name="builders-7-0", job_id=7, queued_ms=1)
    template_hash(valid)
    decided = plan(queued=[], runners=[], spec=valid, now_ms=1)
    desired_status(generation=1, previous={}, spec=valid, counts=decided.counts, now=NOW, invalid="", gitea=None,
                   last_poll=None, failed=())  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=TEMPLATE, url=URLS)
def test_no_spec_the_crd_admits_makes_one_groups_path_raise(template: Any, url: str) -> None:
    one_group(spec_dict(podTemplate=template, gitea={"url": url}), shipped_pod_schema())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(template=TEMPLATE, url=URLS)
def test_without_a_pod_schema_validation_still_never_raises(template: Any, url: str) -> None:
    validate(spec_dict(podTemplate=template, gitea={"url": url}), POLICY, None)
