"""The CRD file matches the model; runner Job manifests keep their invariants."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from reconciler.kube import manifests
from reconciler.kube.crd import crd
from reconciler.kube.dind import is_dind
from reconciler.kube.egress import DIRECT, Egress
from reconciler.kube.manifests import (
    JOB_ID_ANNOTATION,
    GroupRef,
    build_job,
    credential_secret,
    runner_file,
    template_hash,
)
from reconciler.kube.objects import job_from
from reconciler.kube.placement import Placement
from reconciler.kube.runner_cache import RunnerCache
from reconciler.kube.runner_policy import RunnerPolicy
from reconciler.model.names import job_name, job_of_runner
from reconciler.model.spec import RunnerGroupSpec, parse_duration
from reconciler.settings import Settings
from tests import groups
from tests.groups import REFUSED, changed, operator_form, spec_dict

ROOT = Path(__file__).resolve().parents[2]
REF = GroupRef(namespace="ci", name="builders", uid="0000-1111")


def spec(**kw: Any) -> RunnerGroupSpec:
    return groups.spec(**({"scope": "repo", "org": None, "repo": "acme/widgets"} | kw))


def test_crd_file_is_generated_from_the_model() -> None:
    text = (ROOT / "deploy" / "crds" / "gitea.bpg.pw_runnergroups.yaml").read_text()
    assert yaml.safe_load(text) == crd(), "run: python -m reconciler.crd > deploy/crds/gitea.bpg.pw_runnergroups.yaml"


def test_crd_schema_has_every_spec_field() -> None:
    props = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    aliases = {f.alias or name for name, f in RunnerGroupSpec.model_fields.items()}
    assert set(props) == aliases | {"giteaURL"}  # gitea-runner-operator's name, read by the model into gitea.url
    assert props["podTemplate"]["x-kubernetes-preserve-unknown-fields"] is True


def test_every_example_is_a_valid_runnergroup_the_default_policy_allows() -> None:
    examples = sorted((ROOT / "deploy" / "examples").glob("runnergroup-*.yaml"))
    assert {p.name for p in examples} >= {f"runnergroup-{s}.yaml" for s in ("global", "org", "user", "repo")}
    for path in examples:
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "RunnerGroup":
                assert RunnerPolicy().violations(RunnerGroupSpec.model_validate(doc["spec"])) == [], path.name


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("10m", 600), ("1h30m", 5400), ("2h", 7200)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10", "1d", "m10"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_job_manifest_invariants() -> None:
    s = spec(
        podTemplate={
            "metadata": {"labels": {"team": "infra"}},
            "spec": {
                "restartPolicy": "Always",
                "automountServiceAccountToken": True,
                "nodeSelector": {"pool": "ci"},
                "containers": [
                    {
                        "name": "runner",
                        "image": "ignored",
                        "env": [
                            {"name": "GITEA_RUNNER_REGISTRATION_TOKEN", "value": "literal-token-must-go"},
                            {"name": "EXTRA", "value": "kept"},
                        ],
                        "resources": {"limits": {"cpu": "2"}},
                    },
                    {"name": "sidecar", "image": "busybox"},
                ],
            },
        }
    )
    job = build_job(REF, s, name="builders-7-ab12", job_id=7, queued_ms=123)
    pod = job["spec"]["template"]["spec"]
    runner = pod["containers"][0]
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    assert pod["nodeSelector"] == {"pool": "ci"} and pod["containers"][1]["name"] == "sidecar"
    assert runner["image"] == s.image and runner["resources"] == {"limits": {"cpu": "2"}}
    assert runner["securityContext"] == {"privileged": True}  # the default image is dind
    assert runner["terminationMessagePolicy"] == "FallbackToLogsOnError"  # why it failed reaches the status
    env = {e["name"]: e for e in runner["env"]}
    assert "GITEA_RUNNER_REGISTRATION_TOKEN" not in env, "the runner container never holds the token"
    assert "literal-token-must-go" not in json.dumps(job)
    assert env["EXTRA"]["value"] == "kept"
    # No registration token anywhere in the Pod: the prepare init container alone mounts the runner's
    # own credential (a Secret named as the runner), and the state file goes over.
    assert "secretKeyRef" not in json.dumps(pod) and '"reg"' not in json.dumps(pod)
    (register,) = pod["initContainers"]
    assert register["name"] == "prepare" and register["image"] == s.image
    assert register["resources"] == {"limits": {"cpu": "2"}} and "securityContext" not in register
    reg_env = {e["name"]: e for e in register["env"]}
    credential = {"name": "runner-credential", "mountPath": "/run/grs-credential", "readOnly": True}
    assert credential in register["volumeMounts"] and "runner-credential" not in json.dumps(runner["volumeMounts"])
    runner_name = job["metadata"]["annotations"]["gitea.bpg.pw/runner-name"]
    assert {"name": "runner-credential", "secret": {"secretName": runner_name, "defaultMode": 0o444}} in pod["volumes"]
    # The runner's name in Gitea: the Job's and a tag of its own, recorded on the Job (names come back)
    runner_name = job["metadata"]["annotations"]["gitea.bpg.pw/runner-name"]
    assert re.fullmatch(r"builders-7-ab12\.[0-9a-f]{8}", runner_name)
    assert reg_env["GITEA_RUNNER_NAME"]["value"] == runner_name
    again = build_job(REF, s, name="builders-7-ab12", job_id=7, queued_ms=123)
    assert again["metadata"]["annotations"]["gitea.bpg.pw/runner-name"] != runner_name, "never one name twice"
    state = {"name": "runner-state", "mountPath": "/data"}
    assert state in register["volumeMounts"] and state in runner["volumeMounts"]
    assert {"name": "runner-state", "emptyDir": {}} in pod["volumes"]
    assert pod["shareProcessNamespace"] is False
    assert env["GITEA_RUNNER_NAME"]["value"] == runner_name
    assert env["GITEA_RUNNER_LABELS"]["value"].startswith("k8s,ubuntu-latest:docker://")
    meta = job["metadata"]
    assert meta["annotations"][JOB_ID_ANNOTATION] == "7"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "gitea.bpg.pw/v1alpha1",
            "kind": "RunnerGroup",
            "name": "builders",
            "uid": "0000-1111",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert job["spec"]["template"]["metadata"]["labels"]["team"] == "infra"
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] == 600


def test_privileged_only_for_dind_images() -> None:
    plain = build_job(REF, spec(image="docker.io/gitea/act_runner:0.2.13"), name="n", job_id=None)
    assert "securityContext" not in plain["spec"]["template"]["spec"]["containers"][0]
    assert is_dind("gitea/act_runner:nightly-dind-rootless")
    assert not is_dind("registry.dind.example/act_runner:1")


@given(group=st.text(min_size=1, max_size=253), suffix=st.text(min_size=1, max_size=20))
def test_job_names_are_always_valid_dns_labels(group: str, suffix: str) -> None:
    name = job_name(group, suffix)
    assert len(name) <= 63
    assert name[0].isalnum() and name[-1].isalnum()
    assert all(c.islower() or c.isdigit() or c == "-" for c in name)


@pytest.mark.parametrize(("changes", "message"), REFUSED)
def test_the_model_refuses_what_the_schema_refuses_in_the_same_words(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as refused:
        RunnerGroupSpec.model_validate(changed(spec_dict(), changes))
    assert message in str(refused.value)


def test_gitea_runner_operator_form_reads_as_ours() -> None:
    ours = spec_dict(scope="repo", repo="acme/widgets")
    del ours["org"]
    assert RunnerGroupSpec.model_validate(operator_form()).model_dump() == {
        **RunnerGroupSpec.model_validate(ours).model_dump(),
        "org": "acme",
    }
    user_repo = RunnerGroupSpec.model_validate(changed(operator_form(user="jo"), {"org": None}))
    assert user_repo.repo == "jo/widgets"


def test_dind_mode_puts_a_privileged_docker_daemon_beside_an_unprivileged_runner() -> None:
    s = spec(
        image="docker.io/gitea/act_runner:0.2.13",
        containerMode="dind",
        podTemplate={
            "spec": {
                "volumes": [{"name": "dind-storage", "hostPath": {"path": "/var/lib/docker"}}, {"name": "cache"}],
                "initContainers": [{"name": "dind", "image": "mine"}, {"name": "setup", "image": "busybox"}],
                "containers": [{"name": "runner", "env": [{"name": "DOCKER_HOST", "value": "tcp://elsewhere:2375"}]}],
            }
        },
    )
    pod = build_job(REF, s, name="builders-1-ab12", job_id=1)["spec"]["template"]["spec"]
    daemon, setup, prepare = pod["initContainers"]
    assert prepare["name"] == "prepare", "last: the podTemplate's own init containers never see the credential"
    runner = pod["containers"][0]
    assert (daemon["name"], daemon["image"], daemon["restartPolicy"]) == (
        "dind",
        "docker.io/library/docker:28-dind",
        "Always",
    )
    assert daemon["securityContext"] == {"privileged": True} and setup["name"] == "setup"
    assert "securityContext" not in runner, "the runner itself stays unprivileged"
    env = {e["name"]: e["value"] for e in runner["env"] if "value" in e}
    assert env["DOCKER_HOST"] == "unix:///run/dind/docker.sock"
    assert {"name": "dind-socket", "mountPath": "/run/dind"} in runner["volumeMounts"]
    assert {"name": "dind-socket", "mountPath": "/run/dind"} in daemon["volumeMounts"]
    names = ["cache", "dind-socket", "dind-storage", "runner-credential", "runner-state"]
    assert sorted(v["name"] for v in pod["volumes"]) == names
    assert {"name": "dind-storage", "emptyDir": {}} in pod["volumes"], "never the node's own Docker storage"
    plain = build_job(REF, spec(image="docker.io/gitea/act_runner:0.2.13"), name="b-2-x", job_id=2)
    assert [c["name"] for c in plain["spec"]["template"]["spec"]["initContainers"]] == ["prepare"]
    assert "imagePullPolicy" not in daemon, "Kubernetes' default for its tag"


def test_the_docker_daemon_pulls_its_image_as_the_runner_does() -> None:
    """A `:latest` dindImage would get `Always` and fail where no registry answers: the podTemplate's
    pull policy for the runner holds for the daemon too."""
    template = {"spec": {"containers": [{"name": "runner", "imagePullPolicy": "Never"}]}}
    s = spec(containerMode="dind", dindImage="localhost/dind:latest", podTemplate=template)
    pod = build_job(REF, s, name="builders-1-ab12", job_id=1)["spec"]["template"]["spec"]
    (daemon,) = [c for c in pod["initContainers"] if c["name"] == "dind"]
    assert daemon["imagePullPolicy"] == "Never" and pod["containers"][0]["imagePullPolicy"] == "Never"


def test_the_docker_daemon_takes_the_groups_flags_and_serves_the_usual_socket_path_too() -> None:
    """`dindArgs` reach dockerd after the controller's own sockets; the second socket, at Docker's
    usual path on the daemon's side, is what a step's `-v /var/run/docker.sock:...` mounts."""
    flags = ["--registry-mirror=https://mirror.example.com", "--insecure-registry=10.0.0.5:5000", "--mtu=1400"]
    s = spec(containerMode="dind", dindArgs=flags)
    pod = build_job(REF, s, name="builders-1-ab12", job_id=1)["spec"]["template"]["spec"]
    (daemon,) = [c for c in pod["initContainers"] if c["name"] == "dind"]
    assert daemon["args"] == [
        "dockerd",
        "--host=unix:///run/dind/docker.sock",
        "--host=unix:///var/run/docker.sock",
        *flags,
    ]
    assert template_hash(s) != template_hash(spec(containerMode="dind", dindArgs=flags[:1])), "new flags, new runners"
    assert "dindArgs" in crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


def test_a_runner_job_names_its_runner_and_an_earlier_release_s_job_its_own() -> None:
    """What Gitea calls a runner: the name its Job records; a Job without one (made by an earlier
    release) registered under the Job's own name. Either way the Job's name is what precedes the tag."""
    meta = {"namespace": "ci", "name": "builders-7-0", "uid": "u1", "labels": {}}
    tagged = job_from({"metadata": {**meta, "annotations": {"gitea.bpg.pw/runner-name": "builders-7-0.1f2e3d4c"}}})
    assert tagged.runner == "builders-7-0.1f2e3d4c" and job_of_runner(tagged.runner) == "builders-7-0"
    bare = job_from({"metadata": meta})
    assert bare.runner == "builders-7-0" and job_of_runner(bare.runner) == "builders-7-0"


def test_runners_reach_gitea_through_the_given_proxies_and_trust_the_given_ca() -> None:
    """`Egress`: the proxies reach every container that talks out (the daemon pulls through them); the
    CA certificates reach only the register step, which writes them where the runner's clients look."""
    ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----"
    egress = Egress.of(ca_pem=ca, environ={"https_proxy": "http://proxy:3128", "NO_PROXY": ".svc,10.0.0.0/8"})
    template = {"spec": {"containers": [{"name": "runner", "env": [{"name": "no_proxy", "value": "mine"}]}]}}
    s = spec(containerMode="dind", podTemplate=template)
    job = build_job(REF, s, name="builders-1-ab12", job_id=1, egress=egress)
    pod = job["spec"]["template"]["spec"]
    runner, (daemon, register) = pod["containers"][0], pod["initContainers"]

    def env(container: dict[str, Any]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for e in container["env"]:
            out.setdefault(e["name"], []).append(e.get("value", ""))
        return out

    mine = env(runner)
    assert mine["HTTPS_PROXY"] == mine["https_proxy"] == ["http://proxy:3128"]
    assert mine["no_proxy"] == ["mine"] and "NO_PROXY" not in mine, "the podTemplate's own value wins"
    assert mine["SSL_CERT_FILE"] == mine["GIT_SSL_CAINFO"] == ["/data/.ca/ca-certificates.crt"]
    assert mine["NODE_EXTRA_CA_CERTS"] == ["/data/.ca/extra-ca.crt"]
    assert env(register)["GRS_CA_CERTS"] == [ca] and env(register)["SSL_CERT_FILE"] == mine["SSL_CERT_FILE"]
    assert env(daemon)["HTTPS_PROXY"] == ["http://proxy:3128"] and "SSL_CERT_FILE" not in env(daemon)
    assert ca not in json.dumps([runner, daemon]), "the certificates travel to the register step only"
    assert job["metadata"]["annotations"]["gitea.bpg.pw/template-hash"] == template_hash(s, egress)
    assert template_hash(s, egress) != template_hash(s), "another CA or proxy replaces warm runners"
    # Without any, the hash is what an earlier release wrote: an upgrade replaces no runner.
    shaping = json.dumps(s.model_dump(mode="json", include=manifests._SHAPING), sort_keys=True)
    assert template_hash(s, DIRECT) == hashlib.sha256(shaping.encode()).hexdigest()[:16]
    plain = build_job(REF, s, name="builders-1-ab12", job_id=1)["spec"]["template"]["spec"]
    assert not {"SSL_CERT_FILE", "HTTPS_PROXY", "GRS_CA_CERTS"} & {
        e["name"] for c in plain["containers"] + plain["initContainers"] for e in c["env"]
    }


def test_runners_use_the_shared_cache_through_a_config_merged_from_their_own() -> None:
    """The register step gets the cache URL and the secret (by reference only) and the podTemplate's
    `CONFIG_FILE` with the mount it lives on; the runner gets the merged config in its place."""
    cache = RunnerCache("http://cache.ci.svc:8088/", secret="s3cret-value", secret_name="grs-runner-cache")
    mount = {"name": "config", "mountPath": "/config"}
    template = {
        "spec": {
            "containers": [
                {"name": "runner", "env": [{"name": "CONFIG_FILE", "value": "/config/c.yaml"}], "volumeMounts": [mount]}
            ]
        }
    }
    s = spec(podTemplate=template)
    job = build_job(REF, s, name="builders-1-ab12", job_id=1, egress=Egress(cache=cache))
    pod = job["spec"]["template"]["spec"]
    runner, (register,) = pod["containers"][0], pod["initContainers"]
    assert [e for e in runner["env"] if e["name"] == "CONFIG_FILE"] == [
        {"name": "CONFIG_FILE", "value": "/data/.grs/config.yaml"}
    ]
    given = {e["name"]: e.get("value", e.get("valueFrom")) for e in register["env"]}
    assert given["CONFIG_FILE"] == "/config/c.yaml" and mount in register["volumeMounts"]
    assert given["GRS_CACHE_URL"] == "http://cache.ci.svc:8088/"
    assert given["GRS_CACHE_SECRET"] == {"secretKeyRef": {"name": "grs-runner-cache", "key": "secret"}}
    assert "s3cret-value" not in json.dumps(job) + repr(cache), "the secret goes by reference only"
    assert template_hash(s, Egress(cache=cache)) != template_hash(s), "a new cache replaces warm runners"
    rotated = RunnerCache(cache.url, secret="rotated", secret_name=cache.secret_name)
    assert template_hash(s, Egress(cache=rotated)) == template_hash(s, Egress(cache=cache)), "no hash of the secret"
    moved = RunnerCache("http://cache.elsewhere:8088/", secret="s3cret-value", secret_name=cache.secret_name)
    assert template_hash(s, Egress(cache=moved)) != template_hash(s, Egress(cache=cache))


def test_a_dind_rootless_runner_keeps_its_daemons_data_on_an_emptydir() -> None:
    """overlay2 cannot work on the container's own overlayfs root: the default image's daemon gets an
    emptyDir one level above its data root (the daemon chmods the data root itself)."""

    def storage(**kw: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        pod = build_job(REF, spec(**kw), name="builders-1-ab12", job_id=1)["spec"]["template"]["spec"]
        mounts = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"].startswith("/home/rootless")]
        return mounts, [v for v in pod["volumes"] if v["name"] == "dind-rootless-data"]

    mounts, volumes = storage()  # the default image: docker.io/gitea/act_runner:0.2.13-dind-rootless
    assert mounts == [{"name": "dind-rootless-data", "mountPath": "/home/rootless/.local/share"}]
    assert volumes == [{"name": "dind-rootless-data", "emptyDir": {}}]
    assert storage(image="docker.io/gitea/act_runner:0.2.13-dind") == ([], []), "rootful dind keeps its own"
    assert storage(image="docker.io/gitea/act_runner:0.2.13") == ([], [])
    own = {"name": "fast", "mountPath": "/home/rootless/.local/share/docker"}
    template = {"spec": {"containers": [{"name": "runner", "volumeMounts": [own]}], "volumes": [{"name": "fast"}]}}
    assert storage(podTemplate=template) == ([own], []), "a podTemplate's own mount there wins"


def test_the_credential_secret_is_the_runners_own_file_owned_by_its_job() -> None:
    job = build_job(REF, spec(), name="builders-7-ab12", job_id=7, runner="builders-7-ab12.0123abcd")
    labels = ["k8s", "linux:host", "ubuntu-latest:docker://node:20"]
    file = runner_file(
        id=12, uuid="u-12", name="builders-7-ab12.0123abcd", token="own", address="http://g", labels=labels
    )
    secret = credential_secret(job, uid="job-uid", file=file, labels={"app.kubernetes.io/created-by": "grs"})
    meta = secret["metadata"]
    assert (meta["name"], meta["namespace"]) == ("builders-7-ab12.0123abcd", REF.namespace), "the runner's name"
    assert meta["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "builders-7-ab12", "uid": "job-uid"}
    ]
    assert meta["labels"] == {**job["metadata"]["labels"], "app.kubernetes.io/created-by": "grs"}
    # What act_runner's LoadRegistration reads (internal/pkg/config/registration.go), labels whole.
    assert json.loads(base64.b64decode(secret["data"][".runner"])) == {
        "id": 12,
        "uuid": "u-12",
        "name": "builders-7-ab12.0123abcd",
        "token": "own",
        "address": "http://g",
        "labels": labels,
        "ephemeral": True,
    }


def test_the_admins_placement_is_put_over_every_runner_pod_of_its_namespace() -> None:
    """GRS_RUNNER_PLACEMENT: a namespace's entry sets each field it names instead of the default's; its
    nodeSelector keys win over the podTemplate's own, its tolerations are added to the podTemplate's. They
    are part of the runner template: a change replaces idle runners; none leaves the hash as it was."""
    own = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
    ci = {"key": "dedicated", "operator": "Equal", "value": "ci", "effect": "NoExecute"}
    team = {"key": "dedicated", "operator": "Equal", "value": "team-a", "effect": "NoExecute"}
    placement = Settings(
        runner_placement=json.dumps(
            {
                "default": {"nodeSelector": {"pool": "ci", "kubernetes.io/os": "linux"}, "tolerations": [ci]},
                "namespaces": {"team-a": {"nodeSelector": {"pool": "team-a"}, "tolerations": [team]}, "ci": {}},
            }
        )
    ).placement
    s = spec(podTemplate={"spec": {"nodeSelector": {"pool": "mine", "disk": "ssd"}, "tolerations": [own, ci]}})

    def placed(namespace: str, placement: Placement = placement) -> dict[str, Any]:
        ref = GroupRef(namespace=namespace, name="builders", uid="0000-1111")
        return build_job(ref, s, name="builders-7-ab12", job_id=7, placement=placement)

    pod = placed("ci")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "ci", "kubernetes.io/os": "linux", "disk": "ssd"}, "the admin's keys win"
    assert pod["tolerations"] == [own, ci], "added once"
    pod = placed("team-a")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"pool": "team-a", "disk": "ssd"}, "the namespace's own, not the default's"
    assert pod["tolerations"] == [own, ci, team]
    assert placed("ci", Placement())["spec"]["template"]["spec"]["nodeSelector"] == {"pool": "mine", "disk": "ssd"}
    hashes = {ns: placed(ns)["metadata"]["annotations"]["gitea.bpg.pw/template-hash"] for ns in ("ci", "team-a")}
    assert hashes["ci"] == template_hash(s, DIRECT, placement.of("ci")) != template_hash(s)
    assert hashes["team-a"] == template_hash(s, DIRECT, placement.of("team-a")) != hashes["ci"]
    assert template_hash(s, DIRECT, Placement().of("ci")) == template_hash(s), "no placement: the hash as before"
