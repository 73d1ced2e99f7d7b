"""A pass's deletions and the group's finalizer: runner Jobs go only as Gitea allows.

Owns: applying the deletions `plan` decided, each vetted by Gitea first (`gitea_runners`: disabled,
confirmed idle, its row removed), with those disabled but not yet confirmed retried on every pass; the
claims and seats of deleted runners (a seat waits for the Job and its Pods to be gone, see `seating`);
the `RunnerReaped` Event; and holding or letting go of the group's finalizer (`drain`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from reconciler.decide.plan import Delete
from reconciler.decide.state import GroupState
from reconciler.kube.api import Kube, TransientError
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop import drain
from reconciler.loop.gitea_runners import RunnerRows, Vetted
from reconciler.loop.gitea_scopes import registered_spec
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.store.seats.coordination import Coordination

log = logging.getLogger(__name__)


class Deletions:
    """Deletes runners for the groups of one controller."""

    def __init__(
        self, *, kube: Kube, coordination: Callable[[RunnerGroupSpec], Coordination], rows: RunnerRows, metrics: Metrics
    ) -> None:
        self.kube = kube
        self.coordination = coordination  # of the Gitea instance a group serves (`Seating.of`)
        self.rows = rows
        self.metrics = metrics

    async def apply(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec,
        deletes: Sequence[Delete],
        state: GroupState,
        jobs: Sequence[JobObject],
    ) -> set[str]:
        """Delete the runners Gitea lets go (see `gitea_runners`); the names of those it kept."""
        label = f"{group.namespace}/{group.name}"
        alive = {j.name for j in jobs if not j.finished}
        deciding = {d.name for d in deletes}
        retiring = [d for d in self.rows.still_retiring(group, alive) if d.name not in deciding]
        vetted = await self._vet(group, spec, [*deletes, *retiring], jobs)
        if deletes or retiring:
            state.unlisted = tuple(vetted.unlisted)
        state.unlisted = tuple(n for n in state.unlisted if n in alive)
        for d in vetted.allowed:
            await self.kube.delete_job(group.namespace, d.name)
            state.deleting.add(d.name)  # its seat is freed once the Job and its Pods are gone
            if d.job_id is not None:
                await self.coordination(spec).release(d.job_id, holder=d.name)
            self.metrics.runners_deleted.labels(group=label, reason=d.reason).inc()
            log.info("runner deleted", extra={"group": group.name, "job": d.name, "reason": d.reason})
        reaped = [d.name for d in vetted.allowed if d.reason == "pending_timeout"]
        if reaped:
            message = f"Deleted runner Jobs Pending longer than the pendingTimeout: {', '.join(reaped)}"
            await self.kube.event(group.ref, kind="Warning", reason="RunnerReaped", message=message)
        return deciding - {d.name for d in vetted.allowed}

    async def _vet(
        self, group: GroupObject, spec: RunnerGroupSpec, deletes: Sequence[Delete], jobs: Sequence[JobObject]
    ) -> Vetted:
        """Vet each deletion where its runner registered (see its Job): the group's Gitea and scope, or,
        for a runner made before the group's `gitea.url` or scope changed, the ones it was made with (then
        the group's own if those cannot be asked), so that its row goes from where it is."""
        where = {j.name: j.registered for j in jobs}
        runners = {j.name: j.runner for j in jobs}
        parts: dict[str, list[Delete]] = {}
        for d in deletes:
            parts.setdefault(where.get(d.name, ""), []).append(d)
        allowed: list[Delete] = []
        unlisted: list[str] = []
        for registered, part in parts.items():
            then = registered_spec(spec, registered)
            vetted = await self.rows.vet(group, then or spec, part, runners, fallback=spec if then else None)
            allowed += vetted.allowed
            unlisted += vetted.unlisted
        return Vetted(allowed, unlisted)

    async def hold_or_finish(self, group: GroupObject, spec: RunnerGroupSpec, jobs: list[JobObject]) -> bool:
        """Give the group its finalizer; or, deleted, let it go once its runners are done (see `drain`).
        False: look again shortly (runners or rows not done yet, or a write raced ours)."""
        try:
            if not group.deleting:
                await drain.hold(self.kube, group)
                return True
            return await drain.finish(self.kube, self.rows, group, spec, jobs)
        except TransientError as exc:  # a write raced ours (409): the next pass reads the group again
            log.info("finalizer not changed yet", extra={"group": group.name, "error": str(exc)})
            return False
