"""The Kubernetes side of evictions: a runner running a job gets a PodDisruptionBudget, so that
`kubectl drain`, the cluster autoscaler and whatever else evicts through the Eviction API leaves it
alone until its job is over; a runner that died during its job anyway is reported.

One budget per busy runner Job, `minAvailable: 1` over that Job's Pods, owned by the Job (it goes
with it). Per Job, because Kubernetes allows a budget over a Job's Pods only an integer `minAvailable`
(it computes no scale for a Job), and refuses to evict a Pod two budgets select. Pending and idle
runners get none: evicted, they are replaced. A runner is protected once the controller knows it is
busy (its `in_progress` webhook, a poll, its row): an eviction in the second before is not stopped.

A runner Kubernetes stopped (evicted, preempted, its node lost or shut down: `phases`' `disruption`)
did not fail: it is replaced and never holds its group back (`plan.backoff`), and it is reported as
what it is: `RunnerLost` if it was running a job (the job is lost all the same), `RunnerStopped`
(Normal) if it had taken none.

Owns: `Budgets`, the budget's manifest, and the report of failed runners (`RunnerFailed`,
`RunnerLost`, `RunnerStopped`). Must not decide which runner is busy or stopped: `phases` does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from reconciler.decide.phases import Phase, Runner
from reconciler.decide.status import registration_failed
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.manifests import GROUP_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from webhook_scaler.store.seats.coordination import Coordination

log = logging.getLogger(__name__)
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"  # the Job controller sets it on the Pods it makes
# What a RunnerLost Event tells after the runner's name and why it failed.
LOST = "Gitea fails the job once it stops hearing from the runner (its task timeout); re-run it in Gitea"
# What a RunnerStopped Event tells after the runner's name and why it was stopped.
STOPPED = "it is replaced, and does not hold the group back as a failed runner would"
FAILED_MARK_MS = 24 * 3600 * 1000  # a failed runner is reported once; its Job is gone long before


def budget(job: JobObject) -> dict[str, Any]:
    """The budget of one busy runner Job: none of its Pods may be evicted."""
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": {GROUP_LABEL: job.group, MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": job.name, "uid": job.uid, "blockOwnerDeletion": False}
            ],
        },
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {JOB_NAME_LABEL: job.name}}},
    }


class Budgets:
    """Creates the budgets of a group's busy runners, once each."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.warned: set[tuple[str, str]] = set()  # (namespace, error kind) refusals logged already

    async def protect(
        self, group: GroupObject, runners: Sequence[Runner], jobs: Sequence[JobObject], state: GroupState
    ) -> None:
        """Give every busy runner of the group its budget (a 409 means it has one). A failure (no RBAC for
        budgets, the namespace going, the API server busy) is logged, once per kind and namespace, and
        does not stop the pass."""
        busy = {r.name for r in runners if r.phase is Phase.BUSY}
        state.protected &= {j.name for j in jobs}
        for job in jobs:
            if job.name not in busy or job.name in state.protected or not job.uid:
                continue
            try:
                await self.kube.create_budget(budget(job))
            except (PermanentError, TransientError) as exc:
                key = (group.namespace, type(exc).__name__)
                if key not in self.warned:
                    self.warned.add(key)
                    extra = {"group": group.name, "job": job.name, "error": str(exc)}
                    log.warning("runner budget not created: an eviction may stop this busy runner", extra=extra)
                if isinstance(exc, TransientError):
                    continue  # the next pass tries again; a refusal (no RBAC) is not asked again for this Job
            state.protected.add(job.name)


async def report_failures(
    group: GroupObject,
    failed: Sequence[Runner],
    state: GroupState,
    label: str,
    kube: Kube,
    coordination: Coordination,
    metrics: Metrics,
) -> None:
    """One Event and one count per failed runner across replicas (the first to mark it reports it):
    `RunnerLost` for a runner that died during its job, `RunnerFailed` for another, `RunnerStopped` for
    one Kubernetes stopped before it took a job."""
    for r in failed:
        if r.name in state.reported_failures:
            continue
        if not await coordination.lock(f"failed:{group.namespace}/{r.name}", holder=label, ttl_ms=FAILED_MARK_MS):
            continue
        kind, reason, message = _report(r)
        if r.heard:
            metrics.runners_lost.labels(group=label).inc()
        elif not r.disruption and registration_failed(r):
            metrics.registration_failures.labels(group=label).inc()
        await kube.event(group.ref, kind=kind, reason=reason, message=message)
    state.reported_failures = {r.name for r in failed}


def _report(r: Runner) -> tuple[str, str, str]:
    """The Event of one failed runner: its kind, reason and message."""
    why = f"{r.reason}; stopped by Kubernetes: {r.disruption}" if r.disruption else r.reason
    if r.heard:
        return "Warning", "RunnerLost", f"Runner Job {r.name} died during its job ({why}): {LOST}"
    if r.disruption:
        message = f"Runner Job {r.name} was stopped by Kubernetes before it took a job ({r.disruption}); {STOPPED}"
        return "Normal", "RunnerStopped", message
    return "Warning", "RunnerFailed", f"Runner Job {r.name} failed ({r.reason}); its slot is free again"
