"""The runner Pod policy: what a RunnerGroup's spec may ask of its runner Pods beyond the defaults."""

from __future__ import annotations

from typing import Any

import pytest

from reconciler.kube.runner_policy import RunnerPolicy
from reconciler.loop.rounds.group_views import validate
from reconciler.settings import Settings
from tests.groups import spec, spec_dict

HOST = "docker.io/gitea/act_runner:0.2.13"  # no Docker daemon: host mode


def template(**pod: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "runner"}], **pod}}


ASKS = [
    ({"hostPID": True}, "spec.podTemplate.spec.hostPID (GRS_RUNNER_POD_ALLOW_HOST_NAMESPACES)", "host_namespaces"),
    (
        {"hostNetwork": True},
        "spec.podTemplate.spec.hostNetwork (GRS_RUNNER_POD_ALLOW_HOST_NAMESPACES)",
        "host_namespaces",
    ),
    (
        {"volumes": [{"name": "sock", "hostPath": {"path": "/var/run/docker.sock"}}]},
        "spec.podTemplate.spec.volumes[0].hostPath (GRS_RUNNER_POD_ALLOW_HOST_PATH)",
        "host_path",
    ),
    (
        {"serviceAccountName": "deployer"},
        "spec.podTemplate.spec.serviceAccountName (GRS_RUNNER_POD_ALLOW_SERVICE_ACCOUNT)",
        "service_account",
    ),
    (
        {"automountServiceAccountToken": True},
        "spec.podTemplate.spec.automountServiceAccountToken (GRS_RUNNER_POD_ALLOW_SERVICE_ACCOUNT)",
        "service_account",
    ),
    (
        {"volumes": [{"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}]},
        "spec.podTemplate.spec.volumes[0].projected.serviceAccountToken (GRS_RUNNER_POD_ALLOW_SERVICE_ACCOUNT)",
        "service_account",
    ),
    (
        {"initContainers": [{"name": "x", "securityContext": {"privileged": True}}]},
        "spec.podTemplate.spec.initContainers[0].securityContext.privileged (GRS_RUNNER_POD_ALLOW_PRIVILEGED)",
        "privileged",
    ),
    (
        {"containers": [{"name": "runner", "securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}]},
        "spec.podTemplate.spec.containers[0].securityContext.capabilities.add (GRS_RUNNER_POD_ALLOW_PRIVILEGED)",
        "privileged",
    ),
    # Placement is the admin's: every field that chooses a runner's node or displaces other Pods.
    *(
        pytest.param(
            {key: value}, f"spec.podTemplate.spec.{key} (GRS_RUNNER_POD_ALLOW_SCHEDULING)", "scheduling", id=key
        )
        for key, value in [
            ("nodeName", "node-of-team-b"),
            ("nodeSelector", {"team": "b"}),
            ("affinity", {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}),
            ("tolerations", [{"key": "team", "operator": "Equal", "value": "b", "effect": "NoSchedule"}]),
            ("topologySpreadConstraints", [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname"}]),
            ("schedulerName", "anything-goes"),
            ("priorityClassName", "system-node-critical"),
            ("priority", 2000001000),
            ("runtimeClassName", "runc-on-team-b"),
        ]
    ),
]


@pytest.mark.parametrize(("pod", "said", "allow"), ASKS)
def test_a_pod_template_asking_beyond_the_policy_is_refused_naming_the_field_and_setting(
    pod: dict[str, Any], said: str, allow: str
) -> None:
    asked = spec(image=HOST, podTemplate=template(**pod))
    assert RunnerPolicy().violations(asked) == [f"not allowed by the install's runner Pod policy: {said}"]
    allowed: dict[str, Any] = {allow: True}
    assert RunnerPolicy(**allowed).violations(asked) == [], "the admin's setting allows it"


def test_the_default_policy_allows_plain_templates_and_the_docker_modes() -> None:
    plain = template(volumes=[{"name": "w", "emptyDir": {}}], nodeSelector={}, tolerations=[], schedulerName="")
    assert RunnerPolicy().violations(spec(image=HOST, podTemplate=plain)) == [], "empty placement asks nothing"
    own = template(preemptionPolicy="Never", schedulingGates=[{"name": "example.com/wait"}])
    assert RunnerPolicy().violations(spec(image=HOST, podTemplate=own)) == [], "these place nothing"
    assert RunnerPolicy().violations(spec()) == [], "the default image (dind-rootless) runs"
    assert RunnerPolicy().violations(spec(image=HOST, containerMode="dind")) == []
    off = RunnerPolicy(docker=False)
    assert off.violations(spec(image=HOST, containerMode="dind")) == [
        "not allowed by the install's runner Pod policy: spec.containerMode: dind runs a privileged Docker daemon "
        "(GRS_RUNNER_POD_ALLOW_DOCKER)"
    ]
    assert "spec.image docker.io/gitea/act_runner:0.2.13-dind-rootless runs" in off.violations(spec())[0]
    assert off.violations(spec(image=HOST)) == []
    # A dind image's runner container says privileged itself: its Docker mode, not a privileged ask.
    runner = {"containers": [{"name": "runner", "securityContext": {"privileged": True}}]}
    assert RunnerPolicy().violations(spec(podTemplate=template(**runner))) == []
    assert RunnerPolicy().violations(spec(image=HOST, podTemplate=template(**runner))) != []


def test_the_settings_make_the_policy_and_validation_reports_every_refusal() -> None:
    policy = Settings(runner_pod_allow_host_path=True, runner_pod_allow_docker=False).runner_policy
    assert policy == RunnerPolicy(host_path=True, docker=False)
    assert Settings(runner_pod_allow_scheduling=True).runner_policy == RunnerPolicy(scheduling=True)
    asked = spec_dict(image=HOST, podTemplate=template(hostPID=True, serviceAccountName="deployer"))
    valid, problem = validate(asked, Settings().runner_policy)
    assert valid is None
    assert problem.count("not allowed by the install's runner Pod policy") == 2, problem
    assert "hostPID" in problem and "serviceAccountName" in problem
    assert validate(asked)[0] is not None, "without a policy, the schema alone"


@pytest.mark.parametrize(
    ("url", "served"),
    [
        ("https://gitea.example.com", True),
        ("https://GITEA.example.com/", True),
        ("https://gitea.example.com/sub/path", True),
        ("https://git.internal:3000/gitea", True),
        ("https://gitea.example.com.evil.net", False),
        ("https://gitea.example.com:8443", False),
        ("http://gitea.example.com", False),
        ("https://git.internal:3000/giteax", False),
        ("https://attacker.example.net", False),
    ],
)
def test_a_group_may_name_only_a_gitea_the_install_serves(url: str, served: bool) -> None:
    policy = Settings(gitea_urls="https://gitea.example.com/,https://git.internal:3000/gitea").runner_policy
    refused = policy.violations(spec(image=HOST, gitea={"url": url}))
    assert refused == ([] if served else [
        f"spec.gitea.url {url} is not a Gitea this install serves "
        "(GRS_GITEA_URLS: https://gitea.example.com/, https://git.internal:3000/gitea)"
    ])  # fmt: skip
    assert RunnerPolicy().violations(spec(image=HOST, gitea={"url": url})) == [], "no list: any Gitea"


def test_a_pod_template_naming_one_of_the_installs_secrets_is_refused() -> None:
    """env, envFrom, a secret volume, a projected one, an image pull: none may name the webhook or Redis Secret, or the
    runners' cache Secret, which a group's runners would then hand to its jobs."""
    settings = Settings(
        protected_secrets="ci/grs-webhook,ci/grs-redis",
        runner_cache_url="http://cache:8088/",
        runner_cache_secret_name="grs-runner-cache",
    )
    env = [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "grs-redis", "key": "redis-password"}}}]
    pod = {
        "containers": [{"name": "runner", "env": env, "envFrom": [{"secretRef": {"name": "grs-webhook"}}]}],
        "volumes": [
            {"name": "a", "secret": {"secretName": "grs-runner-cache"}},
            {"name": "b", "projected": {"sources": [{"secret": {"name": "grs-redis"}}]}},
            {"name": "c", "secret": {"secretName": "team-own"}},
        ],
        "imagePullSecrets": [{"name": "team-pull"}, {"name": "grs-webhook"}],
    }
    refused = settings.runner_policy.violations(spec(image=HOST, podTemplate={"spec": pod}))
    where = "not allowed by the install's runner Pod policy: spec.podTemplate.spec"
    assert refused == [
        f"{where}.containers[0].env[0]: Secret grs-redis (GRS_PROTECTED_SECRETS)",
        f"{where}.containers[0].envFrom[0]: Secret grs-webhook (GRS_PROTECTED_SECRETS)",
        f"{where}.volumes[0].secret: Secret grs-runner-cache (GRS_PROTECTED_SECRETS)",
        f"{where}.volumes[1].projected: Secret grs-redis (GRS_PROTECTED_SECRETS)",
        f"{where}.imagePullSecrets[1]: Secret grs-webhook (GRS_PROTECTED_SECRETS)",
    ]
