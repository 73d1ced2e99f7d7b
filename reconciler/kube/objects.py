"""Our views of the API objects the reconciler reads: frozen dataclasses made from their raw JSON.

Owns: `GroupObject`, `JobObject` and `PodObject`, and their conversion from the API server's JSON
(a Job's finish condition, a Pod's running time and why its prepare (or register) or runner container failed).
Must not import kubernetes_asyncio or do I/O: `informers` lists and watches the objects and hands
their JSON to the converters here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from reconciler.kube.manifests import (
    GROUP_LABEL,
    JOB_ID_ANNOTATION,
    REGISTERED_ANNOTATION,
    RUNNER_ANNOTATION,
    RUNNER_CONTAINER,
    SETUP_CONTAINERS,
    TEMPLATE_ANNOTATION,
    GroupRef,
)


def _ms(timestamp: str | datetime | None) -> int | None:
    if timestamp is None:
        return None
    if isinstance(timestamp, str):
        timestamp = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return int(timestamp.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class GroupObject:
    """A RunnerGroup as read from the API."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    annotations: Mapping[str, str] = field(default_factory=dict)
    deleting: bool = False  # deleted, held by finalizers until they are removed
    finalizers: tuple[str, ...] = ()
    resource_version: str = ""
    created_ms: int = 0
    deleted_ms: int = 0  # its deletionTimestamp (0: not deleted, or not known)

    @property
    def ref(self) -> GroupRef:
        """Its identity, for owner references and Events."""
        return GroupRef(namespace=self.namespace, name=self.name, uid=self.uid)


@dataclass(frozen=True, slots=True)
class JobObject:
    """A runner Job."""

    namespace: str
    name: str
    group: str
    job_id: int | None
    created_ms: int
    finished: str  # "" while running, "Complete" or "Failed"
    reason: str  # why it failed
    finished_ms: int = 0  # when it finished (0 while running)
    template: str = ""  # the digest of the spec that made it ("" before 0.6)
    uid: str = ""
    registered: str = ""  # where its runner registered (`RunnerGroupSpec.registered_at`; "": unknown)
    runner_name: str = ""  # its runner's name in Gitea (see `names`; "": the Job's own, an earlier release's)

    @property
    def runner(self) -> str:
        """Its runner's name in Gitea: what webhooks, polls and runner rows call it."""
        return self.runner_name or self.name


@dataclass(frozen=True, slots=True)
class PodObject:
    """A Pod of a runner Job."""

    namespace: str
    name: str
    job_name: str
    phase: str
    created_ms: int
    running_since_ms: int | None
    failure: str = ""  # for a failed Pod: the prepare or runner container's exit code and termination message
    disruption: str = ""  # why Kubernetes stopped it, if it did (see `_disruption`)


def group_from(raw: Mapping[str, Any]) -> GroupObject:
    """Convert a RunnerGroup object."""
    meta = raw["metadata"]
    return GroupObject(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        generation=int(meta.get("generation") or 0),
        spec=raw.get("spec") or {},
        status=raw.get("status") or {},
        annotations=meta.get("annotations") or {},
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        resource_version=str(meta.get("resourceVersion") or ""),
        created_ms=_ms(meta.get("creationTimestamp")) or 0,
        deleted_ms=_ms(meta.get("deletionTimestamp")) or 0,
    )


def job_from(raw: Mapping[str, Any]) -> JobObject:
    """Convert a batch/v1 Job."""
    meta = raw["metadata"]
    finished, reason, finished_ms = "", "", 0
    for cond in (raw.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            finished = cond["type"]
            reason = cond.get("reason") or cond.get("message") or ""
            finished_ms = _ms(cond.get("lastTransitionTime")) or 0
    annotations = meta.get("annotations") or {}
    job_id = annotations.get(JOB_ID_ANNOTATION)
    return JobObject(
        namespace=meta["namespace"],
        name=meta["name"],
        group=(meta.get("labels") or {}).get(GROUP_LABEL, ""),
        job_id=job_id_of(job_id),
        created_ms=_ms(meta.get("creationTimestamp")) or 0,
        finished=finished,
        reason=reason,
        finished_ms=finished_ms,
        template=annotations.get(TEMPLATE_ANNOTATION, ""),
        uid=meta.get("uid") or "",
        registered=annotations.get(REGISTERED_ANNOTATION, ""),
        runner_name=annotations.get(RUNNER_ANNOTATION, ""),
    )


def job_id_of(text: str | None) -> int | None:
    """A Gitea job id from an annotation anyone who can edit the Job may have written: ASCII digits that
    fit Gitea's int64, else None (`str.isdigit` also takes "²", which `int` refuses)."""
    if not text or not text.isascii() or not text.isdigit() or len(text) > 18:
        return None
    return int(text)


def pod_from(raw: Mapping[str, Any]) -> PodObject:
    """Convert a Pod."""
    meta, status = raw["metadata"], raw.get("status") or {}
    labels = meta.get("labels") or {}
    running: int | None = None
    failure = ""
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        started = (state.get("running") or {}).get("startedAt")
        if started:
            running = _ms(started)
        ended = state.get("terminated") or {}
        if cs.get("name") == RUNNER_CONTAINER and ended.get("exitCode"):
            failure = _failure(ended)
    for cs in status.get("initContainerStatuses") or []:  # registration failed: the runner never started
        ended = (cs.get("state") or {}).get("terminated") or {}
        if cs.get("name") in SETUP_CONTAINERS and ended.get("exitCode"):
            failure = _failure(ended)
    return PodObject(
        namespace=meta["namespace"],
        name=meta["name"],
        job_name=labels.get("batch.kubernetes.io/job-name") or labels.get("job-name", ""),
        phase=status.get("phase") or "Pending",
        created_ms=_ms(meta.get("creationTimestamp")) or 0,
        running_since_ms=running if status.get("phase") == "Running" else None,
        failure=failure,
        disruption=_disruption(meta, status),
    )


# What a Pod's `status.reason` says when the kubelet or the node controller stopped it (Kubernetes < 1.26
# sets no DisruptionTarget condition): node pressure, a critical Pod's admission, a node lost, the Pod's
# deadline, a node shutting down.
_STOPPED = frozenset({"Evicted", "Preempting", "NodeLost", "DeadlineExceeded", "Terminated", "Shutdown"})


def _disruption(meta: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    """Why Kubernetes stopped the Pod, if it did ("" otherwise): its `DisruptionTarget` condition's reason
    (EvictionByEvictionAPI, PreemptionByScheduler, DeletionByTaintManager, TerminationByKubelet, ...), a
    reason in `_STOPPED`, or `Deleted` for a Pod deleted (by hand, by its Job's deadline)."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "DisruptionTarget" and cond.get("status") == "True":
            return str(cond.get("reason") or "DisruptionTarget")
    if status.get("reason") in _STOPPED:
        return str(status["reason"])
    return "Deleted" if meta.get("deletionTimestamp") else ""


def _failure(terminated: Mapping[str, Any]) -> str:
    """A failed runner container, in one line: its exit code and the last line of its message."""
    lines = [line.strip() for line in str(terminated.get("message") or "").splitlines() if line.strip()]
    said = f": {lines[-1][:300]}" if lines else f" ({terminated.get('reason') or 'Error'})"
    return f"exit code {terminated.get('exitCode')}{said}"
