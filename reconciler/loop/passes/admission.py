"""Runner Pods the API server refuses: a Pod Security level, a ResourceQuota, an admission webhook.

A runner Job whose Pod is refused at admission never gets a Pod. The Job controller tries again and
again and records `FailedCreate` Events on the Job, with the API server's message; the group would
otherwise show a Pending runner until its `pendingTimeout` reaps it. So a runner Job that still has no
Pod `PODLESS_AFTER_MS` after its creation makes the pass read those Events (at most every
`RECHECK_MS` per group; for `WAKE_FOR_MS` a timer wakes the group for it, later any pass does), and
the group reports what it found: the `RunnersAdmitted` condition, and one `RunnerPodRefused`
Warning Event per runner Job.

Owns: noticing Pod-less runner Jobs, and what the group remembers of their refusals. Must not decide
anything about scaling: a refused runner is Pending to `plan`, and its `pendingTimeout` still applies.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.objects import GroupObject, JobObject, PodObject
from reconciler.loop.state import GroupState

log = logging.getLogger(__name__)
PODLESS_AFTER_MS = 3000  # the Job controller makes a Job's Pod within a second or so
RECHECK_MS = 5000  # how often a group with Pod-less runner Jobs reads their Events again
WAKE_FOR_MS = 30_000  # a Pod-less runner Job wakes its group for that long; later passes still look


class Admission:
    """Finds the runner Jobs of a group whose Pods the API server refuses."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def check(
        self,
        group: GroupObject,
        jobs: Sequence[JobObject],
        pods_by_job: Mapping[tuple[str, str], Sequence[PodObject]],
        state: GroupState,
        now_ms: int,
    ) -> int | None:
        """Bring `state.refused` (runner Job -> the API server's message) up to date, record an Event for
        each newly refused Job; when to look again (ms), or None if no runner Job lacks a Pod."""
        podless = [j for j in jobs if not j.finished and not pods_by_job.get((group.namespace, j.name))]
        names = {j.name for j in podless}
        state.refused = {n: m for n, m in state.refused.items() if n in names}
        due = [j for j in podless if now_ms >= j.created_ms + PODLESS_AFTER_MS]
        if due and now_ms >= state.refusals_read_ms + RECHECK_MS:
            state.refusals_read_ms = now_ms
            try:
                found = await self.kube.refused_pods(group.namespace)
            except (PermanentError, TransientError) as exc:  # no RBAC for Events, the API server busy
                log.warning("runner Pods' admission not read", extra={"group": group.name, "error": str(exc)})
                found = {}
            for job in (j for j in due if j.uid in found):
                if job.name not in state.refused:
                    message = f"The API server refused the Pod of runner Job {job.name}: {found[job.uid]}"
                    await self.kube.event(group.ref, kind="Warning", reason="RunnerPodRefused", message=message)
                state.refused[job.name] = found[job.uid]
        waiting = [j.created_ms + PODLESS_AFTER_MS for j in podless if j not in due]
        if any(now_ms < j.created_ms + WAKE_FOR_MS for j in due):
            waiting.append(state.refusals_read_ms + RECHECK_MS)
        return min(waiting, default=None)
