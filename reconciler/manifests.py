"""Pure: the batch/v1 Job that runs one ephemeral act_runner for a RunnerGroup.

Owns: the Job's name (a valid DNS-1123 label of at most 63 characters), its labels, annotations and
controller ownerReference, and the pod invariants the controller enforces over the user's
`podTemplate`: the runner container's image and env (the registration token only through
`secretKeyRef`), `restartPolicy`, and no service-account token. Must not do I/O.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from reconciler.crd import API_VERSION, KIND, RunnerGroupSpec
from reconciler.labels import effective_labels

GROUP_LABEL = "gitea.bpg.pw/runnergroup-name"
MANAGED_BY_LABEL = "gitea.bpg.pw/managed-by"
MANAGED_BY = "gitea-runner-scaler"
JOB_ID_ANNOTATION = "gitea.bpg.pw/job-id"
QUEUED_AT_ANNOTATION = "gitea.bpg.pw/queued-at-ms"
RUNNER_CONTAINER = "runner"
# An ephemeral runner is never restarted in place: a second start would register a second runner.
# A runner that fails fails its Job at once, and the controller decides when to try again (with a
# per-group backoff), so a bad token cannot churn Pods.
BACKOFF_LIMIT = 0
SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"

# Env the controller owns; the same names in the podTemplate are replaced.
_OWNED_ENV = (
    "GITEA_INSTANCE_URL",
    "GITEA_RUNNER_REGISTRATION_TOKEN",
    "GITEA_RUNNER_REGISTRATION_TOKEN_FILE",
    "GITEA_RUNNER_EPHEMERAL",
    "GITEA_RUNNER_NAME",
    "GITEA_RUNNER_LABELS",
)
# containerMode dind: a Docker daemon as a native sidecar (an init container that keeps running; the
# Pod ends when the runner does), reached through a socket on a shared emptyDir.
DIND_CONTAINER = "dind"
DIND_SOCKET_DIR = "/run/dind"
DOCKER_HOST = f"unix://{DIND_SOCKET_DIR}/docker.sock"
_DIND_VOLUMES = ("dind-socket", "dind-storage")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The identity of a RunnerGroup object."""

    namespace: str
    name: str
    uid: str


def job_name(group: str, suffix: str) -> str:
    """`{group}-{suffix}`, cut to a valid DNS-1123 label of at most 63 characters."""
    suffix = re.sub(r"[^a-z0-9-]", "-", suffix.lower()).strip("-") or "x"
    head = re.sub(r"[^a-z0-9-]", "-", group.lower())[: 62 - len(suffix)].strip("-") or "rg"
    name = f"{head}-{suffix}"
    assert _DNS_LABEL.match(name) and len(name) <= 63, name
    return name


def is_dind(image: str) -> bool:
    """Whether the image runs Docker-in-Docker, which needs a privileged container."""
    tag = image.rsplit("/", 1)[-1]
    return "dind" in tag


def _runner_container(template_spec: dict[str, Any]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = template_spec.setdefault("containers", [])
    for container in containers:
        if container.get("name") == RUNNER_CONTAINER:
            return container
    container = {"name": RUNNER_CONTAINER}
    containers.insert(0, container)
    return container


def runner_env(spec: RunnerGroupSpec, *, name: str) -> list[dict[str, Any]]:
    """The env the controller sets on the runner container."""
    token = spec.registration_token.secret_ref
    return [
        {"name": "GITEA_INSTANCE_URL", "value": spec.gitea.url},
        {
            "name": "GITEA_RUNNER_REGISTRATION_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": token.name, "key": token.key}},
        },
        {"name": "GITEA_RUNNER_EPHEMERAL", "value": "true"},
        {"name": "GITEA_RUNNER_NAME", "value": name},
        {"name": "GITEA_RUNNER_LABELS", "value": ",".join(effective_labels(spec.labels, spec.default_labels))},
    ]


def _add_dind_sidecar(pod: dict[str, Any], runner: dict[str, Any], *, image: str) -> None:
    """A privileged dockerd next to the runner, its socket shared: the runner and its job containers
    stay unprivileged. Whatever the podTemplate put under the same names is replaced."""
    socket = {"name": _DIND_VOLUMES[0], "mountPath": DIND_SOCKET_DIR}
    pod["volumes"] = [v for v in pod.get("volumes") or [] if v.get("name") not in _DIND_VOLUMES] + [
        {"name": name, "emptyDir": {}} for name in _DIND_VOLUMES
    ]
    daemon = {
        "name": DIND_CONTAINER,
        "image": image,
        "restartPolicy": "Always",  # a native sidecar: started first, stopped after the runner exits
        "args": ["dockerd", f"--host={DOCKER_HOST}"],
        "env": [{"name": "DOCKER_TLS_CERTDIR", "value": ""}],
        "securityContext": {"privileged": True},
        "volumeMounts": [socket, {"name": _DIND_VOLUMES[1], "mountPath": "/var/lib/docker"}],
        # The runner starts once the daemon answers, so its first job never finds Docker missing.
        "startupProbe": {
            "exec": {"command": ["docker", f"--host={DOCKER_HOST}", "info"]},
            "periodSeconds": 1,
            "failureThreshold": 120,
        },
    }
    inits = [c for c in pod.get("initContainers") or [] if c.get("name") != DIND_CONTAINER]
    pod["initContainers"] = [daemon, *inits]
    runner["env"] = [e for e in runner["env"] if e.get("name") != "DOCKER_HOST"] + [
        {"name": "DOCKER_HOST", "value": DOCKER_HOST}
    ]
    mounts = [m for m in runner.get("volumeMounts") or [] if m.get("name") != _DIND_VOLUMES[0]]
    runner["volumeMounts"] = [*mounts, socket]


def build_job(
    group: GroupRef,
    spec: RunnerGroupSpec,
    *,
    name: str,
    job_id: int | None,
    queued_ms: int | None = None,
) -> dict[str, Any]:
    """The runner Job for one queued Gitea job (`job_id`), or a warm runner (`job_id=None`)."""
    template: dict[str, Any] = copy.deepcopy(spec.pod_template or {})
    meta: dict[str, Any] = template.setdefault("metadata", {})
    labels = {GROUP_LABEL: group.name, MANAGED_BY_LABEL: MANAGED_BY}
    meta["labels"] = {**(meta.get("labels") or {}), **labels}
    pod: dict[str, Any] = template.setdefault("spec", {})
    pod["restartPolicy"] = "Never"
    pod["automountServiceAccountToken"] = False
    container = _runner_container(pod)
    container["image"] = spec.image
    user_env = [e for e in container.get("env") or [] if e.get("name") not in _OWNED_ENV]
    container["env"] = runner_env(spec, name=name) + user_env
    # A runner that fails says why in its last log lines; they become the Pod's termination message,
    # which the controller reports in the group's status (act_runner never logs the token).
    container.setdefault("terminationMessagePolicy", "FallbackToLogsOnError")
    if is_dind(spec.image) and "securityContext" not in container:
        container["securityContext"] = {"privileged": True}
    if spec.container_mode == "dind":
        _add_dind_sidecar(pod, container, image=spec.dind_image)

    annotations: dict[str, str] = {}
    if job_id is not None:
        annotations[JOB_ID_ANNOTATION] = str(job_id)
    if queued_ms is not None:
        annotations[QUEUED_AT_ANNOTATION] = str(queued_ms)
    job_spec: dict[str, Any] = {
        "backoffLimit": BACKOFF_LIMIT,
        "ttlSecondsAfterFinished": spec.ttl_seconds_after_finished,
        "template": template,
    }
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
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": KIND,
                    "name": group.name,
                    "uid": group.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": job_spec,
    }
