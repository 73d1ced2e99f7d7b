"""A pass's deletions and the group's finalizer: runner Jobs go only as Gitea allows.

Owns: applying the deletions `plan` decided, each vetted by Gitea first (`vetting`: disabled,
confirmed idle, its row removed), with those disabled but not yet confirmed retried on every pass; the
recall of runners Gitea lists disabled that this process does not remember disabling (it restarted, or
another replica disabled them): disabled, a runner takes no job, so it serves nobody and goes (reason
`disabled`); the claims and seats of deleted runners (a seat waits for the Job and its Pods to be gone,
see `seating`); the `RunnerReaped` Event; and holding or letting go of the group's finalizer (`drain`:
a drain Gitea is asked no more deletes what the plan says without it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from reconciler.decide.plan import Delete
from reconciler.gitea.api import GiteaError
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.retiring import drain
from reconciler.loop.retiring.vetting import RunnerRows, Vetted
from reconciler.loop.scopes import registered_spec
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.store.seats.coordination import Coordination

log = logging.getLogger(__name__)
RECALL_S = 600.0  # seconds between looks for a group's runners disabled in Gitea that nobody remembers
RECALL_RETRY_S = 60.0  # seconds to the next look when Gitea could not be asked


class Deletions:
    """Deletes runners for the groups of one controller."""

    def __init__(
        self, *, kube: Kube, coordination: Callable[[RunnerGroupSpec], Coordination], rows: RunnerRows, metrics: Metrics
    ) -> None:
        self.kube = kube
        self.coordination = coordination  # of the Gitea instance a group serves (`Seating.of`)
        self.rows = rows
        self.metrics = metrics
        self.drain = drain.Drain(kube, rows)
        self.recalled: dict[str, float] = {}  # group uid -> when its runners were last looked for (`rows.clock`)
        self.held: dict[str, str] = {}  # group uid -> the resourceVersion this process gave the finalizer to

    async def apply(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec,
        deletes: Sequence[Delete],
        state: GroupState,
        jobs: Sequence[JobObject],
    ) -> set[str]:
        """Delete the runners Gitea lets go (see `vetting`); the names of those it kept."""
        label = f"{group.namespace}/{group.name}"
        alive = {j.name for j in jobs if not j.finished}
        deciding = {d.name for d in deletes}
        if not group.deleting:
            await self._recall(group, spec, jobs)
        retiring = [d for d in self.rows.still_retiring(group, alive) if d.name not in deciding]
        vetted = await self._vetted(group, spec, deletes, retiring, jobs)
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

    async def _recall(self, group: GroupObject, spec: RunnerGroupSpec, jobs: Sequence[JobObject]) -> None:
        """Put the group's live runners that Gitea lists disabled, and that this process did not disable,
        among those being retired (`RunnerRows.retiring`): at its first pass here, then every RECALL_S."""
        now = self.rows.clock()
        live = {j.runner: j for j in jobs if not j.finished and (group.uid, j.name) not in self.rows.retiring}
        if not live or now < self.recalled.get(group.uid, now - RECALL_S) + RECALL_S:
            return
        try:
            found = await self.rows.find(await self.rows.tokens.scope(group, spec), set(live))
        except (GiteaError, PermanentError, TransientError) as exc:
            self.recalled[group.uid] = now - RECALL_S + RECALL_RETRY_S
            log.info("disabled runners not looked for", extra={"group": group.name, "error": str(exc)})
            return
        self.recalled[group.uid] = now
        for runner, (_, row) in found.rows.items():
            if row.disabled:
                job = live[runner]
                self.rows.retiring[(group.uid, job.name)] = Delete(job.name, "disabled", job.job_id)
                log.info("runner found disabled in gitea", extra={"group": group.name, "job": job.name})

    async def _vetted(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec,
        deletes: Sequence[Delete],
        retiring: Sequence[Delete],
        jobs: Sequence[JobObject],
    ) -> Vetted:
        """The deletions Gitea lets go (of `deletes` and the `retiring`); for a group whose drain Gitea is
        asked no more (`drain`), the plan's `deletes` (runners not known busy) without asking it."""
        if group.deleting and self.drain.abandoned(group):
            return Vetted(list(deletes))
        vetted = await self._vet(group, spec, [*deletes, *retiring], jobs)
        if group.deleting and (deletes or retiring):
            self.drain.heard(group, vetted)
        return vetted

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
        unasked: list[Vetted] = []
        for registered, part in parts.items():
            then = registered_spec(spec, registered)
            vetted = await self.rows.vet(group, then or spec, part, runners, fallback=spec if then else None)
            allowed += vetted.allowed
            unlisted += vetted.unlisted
            unasked += [vetted] if vetted.unasked else []
        why = unasked[0] if unasked else Vetted([])
        return Vetted(allowed, unlisted, unasked=why.unasked, outlook=why.outlook)

    async def hold_or_finish(
        self, group: GroupObject, spec: RunnerGroupSpec, jobs: list[JobObject], now_ms: int, drain_timeout: float
    ) -> bool:
        """Give the group its finalizer (and keep its API token at hand for its drain, see `tokens`);
        or, deleted, let it go once its runners are done, or at its deadline (see `drain`; `now_ms`: the
        pass's time, ms since the epoch). False: look again shortly (runners or rows not done yet, or a
        write raced ours)."""
        if not group.deleting:
            return await self.hold(group, spec)
        try:
            gone = await self.drain.finish(group, spec, jobs, now=now_ms / 1000, drain_timeout=drain_timeout)
        except TransientError as exc:  # a write raced ours (409): the next pass reads the group again
            log.info("finalizer not changed yet", extra={"group": group.name, "error": str(exc)})
            return False
        if gone:
            self.recalled.pop(group.uid, None)
            self.held.pop(group.uid, None)
        return gone

    async def hold(self, group: GroupObject, spec: RunnerGroupSpec) -> bool:
        """Give the group its finalizer and keep its API token at hand for its drain: before a pass
        registers a runner (a group deleted without it goes at once, and its runners' rows stay in Gitea
        for good) and at every pass's end. Once per resourceVersion: the cache shows our write later.
        False: a write raced ours (409), or the group is being deleted (422); look again shortly."""
        try:
            if self.held.get(group.uid) != group.resource_version or not group.resource_version:
                await drain.hold(self.kube, group)
                self.held[group.uid] = group.resource_version
            await self.rows.tokens.remember(group, spec)
        except TransientError as exc:
            log.info("finalizer not changed yet", extra={"group": group.name, "error": str(exc)})
            return False
        return True
