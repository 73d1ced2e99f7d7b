"""Every RunnerGroup a failure domain of its own: what one group or one Job brings is read, checked and
refused inside that object alone, and the status says what stops a job from getting a runner."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from reconciler.decide.gitea_health import gitea_version, poll_failed
from reconciler.decide.status import Condition, desired_status, failing
from reconciler.kube.informers import Informer
from reconciler.kube.objects import GroupObject, job_from, job_id_of
from reconciler.kube.runner_policy import RunnerPolicy
from reconciler.loop.rounds.group_views import GroupViews, validate
from reconciler.metrics import Metrics
from reconciler.settings import Settings
from tests.groups import spec, spec_dict

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)

# Shapes a podTemplate takes from habits of other tools; the CRD keeps podTemplate open, so they arrive.
WRONG_SHAPES = [
    pytest.param({"spec": {"containers": [{"name": "runner", "env": ["FOO=bar"]}]}}, id="env-as-compose-strings"),
    pytest.param({"spec": {"imagePullSecrets": ["regcred"]}}, id="pull-secrets-as-names"),
    pytest.param({"spec": {"containers": [{"name": "runner", "envFrom": [None]}]}}, id="env-from-null"),
    pytest.param({"spec": {"containers": "runner"}}, id="containers-not-a-list"),
    pytest.param({"spec": {"volumes": [{"name": "x", "projected": {"sources": "all"}}]}}, id="sources-not-a-list"),
    pytest.param({"spec": {"containers": [{"name": "runner", "securityContext": "privileged"}]}}, id="context-string"),
    pytest.param({"spec": ["containers"]}, id="spec-a-list"),
]


@pytest.mark.parametrize("template", WRONG_SHAPES)
def test_the_runner_pod_policy_never_raises_on_a_wrong_shape_and_still_refuses_what_it_must(template: Any) -> None:
    policy = RunnerPolicy(secret_names=frozenset({"grs-webhook"}))
    assert policy.violations(spec(podTemplate=template)) == []
    pod = template["spec"] if isinstance(template["spec"], dict) else {}
    worse = {"spec": {**pod, "hostNetwork": True, "volumes": [{"name": "s", "secret": {"secretName": "grs-webhook"}}]}}
    refused = policy.violations(spec(podTemplate=worse))
    assert any("hostNetwork" in r for r in refused), refused
    assert any("Secret grs-webhook" in r for r in refused), refused


@pytest.mark.parametrize(
    ("url", "valid"),
    [
        pytest.param("https://gitea.example.com:abc", False, id="port-letters"),
        pytest.param("https://gitea.example.com:99999", False, id="port-too-big"),
        pytest.param("https://gitea.example.com:0", False, id="port-zero"),
        pytest.param("https://ci:secret@gitea.example.com", False, id="password"),
        pytest.param("https://gitea.example.com/?x=1", False, id="query"),
        pytest.param("https://gitea.example.com:3000/sub/", True, id="port-and-path"),
        pytest.param("http://[fd00::1]:3000", True, id="ipv6"),
        pytest.param("http://10.0.0.5", True, id="ipv4"),
    ],
)
def test_a_gitea_url_is_one_the_instance_parser_reads_or_the_spec_is_invalid_naming_it(url: str, valid: bool) -> None:
    parsed, problem = validate(spec_dict(gitea={"url": url}))
    assert (parsed is not None) is valid, problem
    if not valid:
        assert problem.startswith("spec.gitea.url: ")
        assert "secret" not in problem or "secret@" not in url  # the URL's password is never echoed
    else:
        assert parsed is not None
        from webhook_scaler.gitea import instance_url

        assert instance_url(parsed.gitea.url)  # the function every side uses takes it


@pytest.mark.parametrize(
    ("text", "expected"),
    [("42", 42), ("²", None), ("٣", None), ("-1", None), ("", None), (None, None), ("9" * 19, None), ("0017", 17)],
)
def test_a_job_id_annotation_is_ascii_digits_or_nothing(text: str | None, expected: int | None) -> None:
    assert job_id_of(text) == expected


def test_a_runner_job_with_a_strange_job_id_annotation_is_read_without_one() -> None:
    raw = {"metadata": {"namespace": "ci", "name": "b-1", "annotations": {"gitea.bpg.pw/job-id": "²"}}}
    assert job_from(raw).job_id is None


async def test_one_object_the_cache_cannot_read_is_left_out_and_the_others_kept() -> None:
    def convert(raw: Mapping[str, Any]) -> str:
        if raw["metadata"]["name"] == "bad":
            raise ValueError("no")
        return str(raw["metadata"]["name"])

    async def listed(**_: Any) -> dict[str, Any]:
        items = [{"metadata": {"namespace": "ci", "name": n}} for n in ("a", "bad", "b")]
        return {"items": items, "metadata": {"resourceVersion": "7"}}

    informer = Informer("jobs", list_fn=listed, convert=convert, sanitize=lambda x: x, on_change=lambda: None)
    assert await informer._relist() == "7"
    assert informer.items == {("ci", "a"): "a", ("ci", "b"): "b"}


def group(name: str, namespace: str = "ci", **spec_changes: Any) -> GroupObject:
    return GroupObject(
        namespace=namespace, name=name, uid=f"uid-{namespace}-{name}", generation=1, spec=spec_dict(**spec_changes),
        status={}, created_ms=1,
    )  # fmt: skip


class Raising(RunnerPolicy):
    """A policy that fails on one group's spec: a bug no check foresaw."""

    def violations(self, spec: Any) -> list[str]:
        if spec.org == "broken":
            raise AttributeError("'str' object has no attribute 'get'")
        return []


class RaisingSettings(Settings):
    @property
    def runner_policy(self) -> RunnerPolicy:
        return Raising()


def test_a_group_whose_validation_raises_is_invalid_alone_named_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = Metrics.create(CollectorRegistry())
    groups = [group("good", "team-a"), group("bad", "team-b", org="broken")]
    settings = RaisingSettings(redis_url="redis://localhost:1", gitea_url="http://gitea.invalid:3000")
    views = GroupViews(settings, metrics=metrics, groups=lambda: groups)
    out = {(g.namespace, g.name): (s, problem) for g, s, problem in views()}
    assert out[("team-a", "good")][0] is not None
    bad_spec, problem = out[("team-b", "bad")]
    assert bad_spec is None and "the controller failed on this group (validate): AttributeError" in problem
    assert metrics.group_faults.labels(group="team-b/bad", stage="validate")._value.get() == 1
    record = next(r for r in caplog.records if r.getMessage().startswith("a group's objects raised"))
    assert (record.__dict__["namespace"], record.__dict__["group"]) == ("team-b", "bad")


@pytest.mark.parametrize(
    ("status", "version", "reason", "words"),
    [
        pytest.param(401, None, "TokenRefused", "refused the group's API token", id="401"),
        pytest.param(403, None, "TokenRefused", "lacks the scopes", id="403"),
        pytest.param(404, "1.24.6", "GiteaTooOld", "needs Gitea 1.25 or newer; this one is 1.24.6", id="124"),
        pytest.param(404, "11.0.1+gitea-1.22.0", "GiteaTooOld", "Forgejo is not supported", id="forgejo"),
        pytest.param(404, "1.25.2", "ScopeNotFound", "Gitea has no org acme", id="no-such-org"),
        pytest.param(404, None, "ScopeNotFound", "Gitea has no org acme", id="version-unknown"),
        pytest.param(502, None, "PollFailed", "HTTP", id="bad-gateway"),
    ],
)  # fmt: skip
def test_a_failed_poll_says_what_to_fix(status: int, version: str | None, reason: str, words: str) -> None:
    condition = poll_failed(status=status, error=f"GET /orgs/acme/actions/jobs: HTTP {status}", where="org acme",
                            version=version)  # fmt: skip
    assert (condition.type, condition.status, condition.reason) == ("GiteaReachable", "False", reason)
    assert words in condition.message


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1.25.0", (1, 25)), ("1.26.0+dev-100-gabc", (1, 26)), ("v1.24.3", (1, 24)), ("11.0.1+gitea-1.22.0", (1, 22)),
     ("nightly", None)],
)  # fmt: skip
def test_gitea_versions_are_read_as_the_gitea_they_stand_for(text: str, expected: tuple[int, int] | None) -> None:
    assert gitea_version(text) == expected


def ready(**kw: Any) -> dict[str, Any]:
    options: dict[str, Any] = {"counts": None, "invalid": "", "gitea": None, "last_poll": None, "failed": ()} | kw
    status = desired_status(generation=1, previous={}, spec=spec(), now=NOW, **options)
    return next(c for c in status["conditions"] if c["type"] == "Ready")


@pytest.mark.parametrize(
    ("kw", "reason"),
    [
        pytest.param({}, "Reconciled", id="nothing-wrong"),
        pytest.param({"gitea": Condition("GiteaReachable", "Unknown", "NotPolledYet", "")}, "Reconciled", id="unknown"),
        pytest.param({"gitea": Condition("GiteaReachable", "False", "TokenRefused", "x")}, "TokenRefused", id="token"),
        pytest.param({"gitea": Condition("GiteaReachable", "False", "GiteaTooOld", "x")}, "GiteaTooOld", id="old"),
        pytest.param({"create_refused": "quota exceeded"}, "JobRefused", id="quota"),
        pytest.param({"refused": {"b-1": "violates PodSecurity"}}, "PodRefused", id="pod-security"),
        pytest.param({"unlisted": ("b-1",)}, "NotInScope", id="registered-elsewhere"),
    ],
)
def test_ready_is_true_only_when_a_job_can_get_a_runner_now(kw: dict[str, Any], reason: str) -> None:
    condition = ready(**kw)
    assert condition["reason"] == reason
    assert condition["status"] == ("True" if reason == "Reconciled" else "False")


def test_passes_that_keep_failing_turn_ready_false_and_keep_the_other_conditions() -> None:
    previous = desired_status(generation=3, previous={}, spec=spec(), now=NOW, counts=None, invalid="", gitea=None,
                              last_poll=None, failed=())  # fmt: skip
    status = failing(previous, "ConnectionError: Redis unavailable", now=NOW, generation=3)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == ("False", "PassFailing")
    assert "Redis unavailable" in conditions["Ready"]["message"]
    assert set(conditions) == {c["type"] for c in previous["conditions"]}
    assert status["activeRunners"] == previous["activeRunners"]
    assert failing({"conditions": ["junk", None]}, "x", now=NOW, generation=1)["conditions"][0]["type"] == "Ready"
