"""Pure: the batch/v1 Job that runs one ephemeral act_runner for a RunnerGroup.

Owns: the Job's name (a valid DNS-1123 label of at most 63 characters), its labels, annotations and
controller ownerReference, and the pod invariants the controller enforces over the user's
`podTemplate`: the runner container's image and env, `restartPolicy`, no service-account token, and
the admin's nodeSelector and tolerations for the group's namespace (`placement`).
(The Docker daemon of `containerMode: dind` is `dind`'s.)

No registration token reaches a runner Pod: the controller registers each runner with Gitea itself
(`gitea.register`) and gives the Pod only that runner's own credential, its `.runner` file, in a Secret
named as the runner and owned by its Job (`credential_secret`), so it goes with the Job. An init container
(`prepare`, the runner image, no network) copies that file into an emptyDir mounted at /data in both
containers, with the CA bundle and the cache config if the install has them; the runner container then
starts the image's own entrypoint, which finds `.runner` and runs only the daemon. A prepare step that
fails (an image without the runner binary) fails the Pod and its Job with its last line as the reason,
and the controller's per-group backoff decides when to try again. Must not do I/O.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.kube import attribution
from reconciler.kube.crd import API_VERSION, KIND
from reconciler.kube.dind import add_dind_sidecar, add_rootless_storage, is_dind, is_rootless_dind
from reconciler.kube.egress import DIRECT, WRITE_CA, Egress, owned_names
from reconciler.kube.placement import ANY_NODE, UNPINNED, Nodes, Placement
from reconciler.kube.runner_cache import CONFIG_FILE, WRITE_CONFIG, config_env, config_path
from reconciler.model.labels import effective_labels
from reconciler.model.names import runner_name
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.store.jobs.model import QueuedJob

GROUP_LABEL = "gitea.bpg.pw/runnergroup-name"
MANAGED_BY_LABEL = "gitea.bpg.pw/managed-by"
MANAGED_BY = "gitea-runner-scaler"
JOB_ID_ANNOTATION = "gitea.bpg.pw/job-id"
QUEUED_AT_ANNOTATION = "gitea.bpg.pw/queued-at-ms"
TEMPLATE_ANNOTATION = "gitea.bpg.pw/template-hash"  # which spec made the runner: a changed one replaces it
REGISTERED_ANNOTATION = "gitea.bpg.pw/registered-at"  # "{Gitea URL} {scope} {target}": where its row is
RUNNER_ANNOTATION = "gitea.bpg.pw/runner-name"  # the runner's name in Gitea (see `names`)
# The spec fields a runner is made from; the others (its sizing, its API token) change no runner.
_SHAPING = {"scope", "org", "user", "repo", "gitea", "labels", "default_labels", "registration_token", "image",
            "container_mode", "dind_image", "dind_args", "pod_template", "ttl_seconds_after_finished",
            "active_deadline_seconds"}  # fmt: skip
RUNNER_CONTAINER = "runner"
PREPARE_CONTAINER = "prepare"
SETUP_CONTAINERS = (PREPARE_CONTAINER, "register")  # "register": the in-Pod registration of releases before
STATE_VOLUME = "runner-state"
STATE_DIR = "/data"  # the upstream images' working directory, where their entrypoint looks for .runner
CREDENTIAL_VOLUME = "runner-credential"
CREDENTIAL_DIR = "/run/grs-credential"  # the credential Secret, mounted in the prepare container only
CREDENTIAL_KEY = ".runner"
# An ephemeral runner is never restarted in place: its credential is good for one job only.
# A runner that fails fails its Job at once, and the controller decides when to try again (with a
# per-group backoff), so a bad token cannot churn Pods.
BACKOFF_LIMIT = 0
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"

# Env the controller owns; the same names in the podTemplate are dropped (the token ones everywhere).
_OWNED_ENV = (
    "GITEA_INSTANCE_URL",
    "GITEA_RUNNER_REGISTRATION_TOKEN",
    "GITEA_RUNNER_REGISTRATION_TOKEN_FILE",
    "GITEA_RUNNER_EPHEMERAL",
    "GITEA_RUNNER_NAME",
    "GITEA_RUNNER_LABELS",
)
# POSIX sh, run by the prepare init container in the runner image (upstream's images have sh): it
# checks the image has a runner binary (act_runner up to 0.x, gitea-runner from 1.0), writes the CA
# bundle and the cache config if any, and puts the runner's credential where the image's entrypoint
# looks for it: a file of the runner's user, private and writable (the daemon rewrites it when the
# labels it runs with differ), never the Secret volume's read-only mode. Its last line says why it
# failed (the Pod's termination message, in the group's status).
PREPARE_SCRIPT = (
    r"""set -u
command -v act_runner >/dev/null || command -v gitea-runner >/dev/null || {
  echo "registration failed: the image has neither act_runner nor gitea-runner on its PATH"
  exit 1
}
cd "$GRS_STATE_DIR" || exit 1
"""
    + WRITE_CA
    + WRITE_CONFIG
    + r"""state="${RUNNER_STATE_FILE:-.runner}"
(umask 077 && cat "$GRS_CREDENTIAL_FILE" >"$state") || {
  rm -f "$state"
  echo "registration failed: cannot write the runner's credential to $state"
  exit 1
}
echo "runner $GITEA_RUNNER_NAME registered by the controller: its credential is in $state"
"""
)


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The identity of a RunnerGroup object."""

    namespace: str
    name: str
    uid: str


def _runner_container(template_spec: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = template_spec.setdefault("containers", [])
    for container in containers:
        if container.get("name") == RUNNER_CONTAINER:
            return container
    container = {"name": RUNNER_CONTAINER}
    containers.insert(0, container)
    return container


def runner_env(spec: RunnerGroupSpec, *, name: str) -> list[dict[str, Any]]:
    """The env the controller sets on the runner container: everything but the token."""
    return [
        {"name": "GITEA_INSTANCE_URL", "value": spec.gitea.url},
        {"name": "GITEA_RUNNER_EPHEMERAL", "value": "true"},
        {"name": "GITEA_RUNNER_NAME", "value": name},
        {"name": "GITEA_RUNNER_LABELS", "value": ",".join(effective_labels(spec.labels, spec.default_labels))},
    ]


def _prepare_container(spec: RunnerGroupSpec, runner: dict[str, Any], *, name: str, egress: Egress) -> dict[str, Any]:
    """The init container that prepares the runner's state: the runner's image, its `CONFIG_FILE`, volume
    mounts (where that file may be) and security context, the CA and cache settings (`egress`), and the
    only mount of the runner's credential Secret."""
    config = [e for e in runner.get("env") or [] if e.get("name") in (CONFIG_FILE, "RUNNER_STATE_FILE")]
    container: dict[str, Any] = {
        "name": PREPARE_CONTAINER,
        "image": spec.image,
        "command": ["/bin/sh", "-c", PREPARE_SCRIPT],
        "env": [
            *runner_env(spec, name=name),
            {"name": "GRS_STATE_DIR", "value": STATE_DIR},
            {"name": "GRS_CREDENTIAL_FILE", "value": f"{CREDENTIAL_DIR}/{CREDENTIAL_KEY}"},
            *config,
            *egress.register_env(STATE_DIR),
            *config_env(STATE_DIR, fetch_interval=spec.fetch_interval),
        ],
        "volumeMounts": [
            *copy.deepcopy(runner["volumeMounts"]),
            {"name": CREDENTIAL_VOLUME, "mountPath": CREDENTIAL_DIR, "readOnly": True},
        ],
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    for key in ("imagePullPolicy", "securityContext", "resources"):
        if key in runner:
            container[key] = copy.deepcopy(runner[key])
    return container


def runner_file(*, id: int, uuid: str, name: str, token: str, address: str, labels: Sequence[str]) -> str:
    """A runner's `.runner` file, as act_runner's `register --ephemeral` writes it (internal/pkg/config/
    registration.go; its WARNING key is one act_runner ignores)."""
    registration = {"id": id, "uuid": uuid, "name": name, "token": token, "address": address,
                    "labels": list(labels), "ephemeral": True}  # fmt: skip
    return json.dumps(registration, indent=2) + "\n"


def credential_secret(job: Mapping[str, Any], *, uid: str, file: str, labels: Mapping[str, str]) -> dict[str, Any]:
    """The Secret with a runner's `.runner` `file`: named as the runner (the Job `job`'s), owned by the Job
    (created with `uid`), so it goes with it; `labels` besides the Job's."""
    meta = job["metadata"]
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": meta["name"], "uid": uid}
    name = meta["annotations"][RUNNER_ANNOTATION]
    mine = {"name": name, "namespace": meta["namespace"], "labels": {**meta["labels"], **labels}}
    data = {CREDENTIAL_KEY: base64.b64encode(file.encode()).decode()}
    return {"apiVersion": "v1", "kind": "Secret", "metadata": {**mine, "ownerReferences": [owner]}, "data": data}


def _add_volumes(pod: dict[str, Any], container: dict[str, Any], *, runner: str) -> None:
    """The emptyDir that carries `.runner` from the prepare container to the runner `container`
    (replacing whatever the podTemplate put under its name or at /data), and the credential Secret of
    the runner named `runner` (named as it: one Secret per runner ever, never an earlier one's)."""
    ours = (STATE_VOLUME, CREDENTIAL_VOLUME)
    pod["volumes"] = [v for v in pod.get("volumes") or [] if v.get("name") not in ours] + [
        {"name": STATE_VOLUME, "emptyDir": {}},
        {"name": CREDENTIAL_VOLUME, "secret": {"secretName": runner, "defaultMode": 0o444}},
    ]
    mounts = [m for m in container.get("volumeMounts") or [] if m.get("name") not in ours]
    mounts = [m for m in mounts if m.get("mountPath", "").rstrip("/") != STATE_DIR]
    container["volumeMounts"] = [*mounts, {"name": STATE_VOLUME, "mountPath": STATE_DIR}]


def build_job(
    group: GroupRef,
    spec: RunnerGroupSpec,
    *,
    name: str,
    job_id: int | None,
    queued_ms: int | None = None,
    runner: str | None = None,
    egress: Egress = DIRECT,
    placement: Placement = UNPINNED,
    about: QueuedJob | None = None,
) -> dict[str, Any]:
    """The runner Job for one queued Gitea job (`job_id`; `about`: that job as recorded, said in labels and
    annotations, see `attribution`), or a warm runner (`job_id=None`); its runner registers as `runner`
    (default: a new name, `names.runner_name`), reaches Gitea by `egress`, runs by `placement`."""
    told, telling = attribution.of(about, spec.gitea.url) if about is not None else ({}, {})
    labels = {**told, GROUP_LABEL: group.name, MANAGED_BY_LABEL: MANAGED_BY}
    runner = runner or runner_name(name)
    nodes = placement.of(group.namespace)
    template = _pod_template(spec, name=runner, labels=labels, egress=egress)
    nodes.apply(template["spec"])  # the admin's, over the podTemplate's
    annotations = {TEMPLATE_ANNOTATION: template_hash(spec, egress, nodes), REGISTERED_ANNOTATION: spec.registered_at}
    extra = {RUNNER_ANNOTATION: runner, JOB_ID_ANNOTATION: job_id, QUEUED_AT_ANNOTATION: queued_ms}
    annotations |= {key: str(value) for key, value in extra.items() if value is not None} | telling
    job_spec: dict[str, Any] = {"backoffLimit": BACKOFF_LIMIT, "template": template}
    job_spec["ttlSecondsAfterFinished"] = spec.ttl_seconds_after_finished
    if spec.active_deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = spec.active_deadline_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": group.namespace,
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [_owner_reference(group)],
        },
        "spec": job_spec,
    }


def template_hash(spec: RunnerGroupSpec, egress: Egress = DIRECT, nodes: Nodes = ANY_NODE) -> str:
    """A short digest of the spec fields its runners are made from, and of their `egress` and the admin's
    `nodes` for them (`Placement.of` their namespace), if any."""
    shaping = json.dumps(spec.model_dump(mode="json", include=_SHAPING), sort_keys=True) + egress.digest + nodes.digest
    return hashlib.sha256(shaping.encode()).hexdigest()[:16]


def _owner_reference(group: GroupRef) -> dict[str, Any]:
    """The RunnerGroup as the Job's controller: deleting the group deletes its runner Jobs."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": group.name,
        "uid": group.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _pod_template(spec: RunnerGroupSpec, *, name: str, labels: dict[str, str], egress: Egress) -> dict[str, Any]:
    """The group's `podTemplate` under the controller's invariants: the runner container's image and
    env, the prepare init container, the state and credential volumes, and no service-account token."""
    template: dict[str, Any] = copy.deepcopy(spec.pod_template or {})
    meta: dict[str, Any] = template.setdefault("metadata", {})
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    pod: dict[str, Any] = template.setdefault("spec", {})
    pod["restartPolicy"] = "Never"
    pod["automountServiceAccountToken"] = False
    container = _runner_container(pod)
    container["image"] = spec.image
    user_env = [e for e in container.get("env") or [] if e.get("name") not in _OWNED_ENV]
    # The way out to Gitea, unless the podTemplate sets a variable of it itself (in either case).
    mine = {str(e.get("name")).upper() for e in user_env} & owned_names(egress, STATE_DIR)
    out = [e for e in egress.ca_env(STATE_DIR) + egress.proxy_env() if e["name"].upper() not in mine]
    container["env"] = runner_env(spec, name=name) + out + user_env
    _add_volumes(pod, container, runner=name)
    prepare = _prepare_container(spec, container, name=name, egress=egress)
    # the prepare step merged the podTemplate's config (or the image's) into this one
    container["env"] = [e for e in container["env"] if e.get("name") != CONFIG_FILE]
    container["env"].append({"name": CONFIG_FILE, "value": config_path(STATE_DIR)})
    pod["shareProcessNamespace"] = False  # one container's processes are not another's to see
    # A runner that fails says why in its last log lines; they become the Pod's termination message,
    # which the controller reports in the group's status (act_runner never logs the token).
    container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    if is_dind(spec.image) and "securityContext" not in container:
        container["securityContext"] = {"privileged": True}
    if is_rootless_dind(spec.image):
        add_rootless_storage(pod, container)
    if spec.container_mode == "dind":
        add_dind_sidecar(pod, container, image=spec.dind_image, args=spec.dind_args, env=egress.proxy_env())
    # Last, after the podTemplate's own init containers (which might otherwise read the credential).
    inits = [c for c in pod.get("initContainers") or [] if c.get("name") not in SETUP_CONTAINERS]
    pod["initContainers"] = [*inits, prepare]
    return template
