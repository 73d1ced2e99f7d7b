"""Gitea's own word on our runners: ask before deleting one, remove its row with it, sweep the ghosts.

Owns: which runner Job deletions may go ahead, the `DELETE .../actions/runners/{id}` of the runner rows
our runners leave in Gitea, and the periodic sweep of offline rows whose runner Job is gone.

- A surplus idle runner (Redis knows no job for it) is deleted only when Gitea proves it idle: its row
  is listed and neither its `busy` flag (a report on a task in the last 10 s) nor an `in_progress` job
  in a complete jobs listing names it; or a complete one-page listing has no row of that name (it
  never registered, or Gitea removed it after its job). Anything else, Gitea unreachable or a jobs
  listing that moved under us included, keeps the runner: a Redis loss or a dropped `in_progress`
  webhook never costs a running job. A runner found busy is not asked about again for `BUSY_HOLD`
  seconds: it counts as busy meanwhile.
- Its row is deleted before its Job, so it can take no job once the Job is going. What remains is the
  moment between Gitea's answer and the DELETE (milliseconds, against act_runner's fetch interval of
  seconds), in which Gitea could hand the runner a job; the row's deletion then fails that job.
- Other deletions (a runner Pending too long, one whose job is over) go ahead whatever Gitea says; a
  row they leave is swept later.
- The sweep lists each (Gitea, scope, token) once per interval and deletes rows that are offline,
  named like a runner Job of a group of that scope, and whose Job is finished or gone and holds no
  seat (a Job being created holds one before the cache can show it).
Must not touch Redis; Kubernetes only through the cache and `Kube.secret_value`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from reconciler.gitea_paging import PAGE_SIZE
from reconciler.giteaapi import GiteaClient, GiteaError, PollScope
from reconciler.kube import Kube, PermanentError, TransientError
from reconciler.manifests import RUNNER_SUFFIX, job_name
from reconciler.metrics import Metrics
from reconciler.objects import GroupObject, JobObject
from reconciler.plan import Delete
from reconciler.spec import RunnerGroupSpec
from webhook_scaler.gitea import ActionRunner

log = logging.getLogger(__name__)
BUSY_HOLD = 30.0  # seconds a runner Gitea called busy counts as busy without asking again


async def scope_of(
    kube: Kube,
    spec: RunnerGroupSpec,
    namespace: str,
    *,
    cache: dict[tuple[str, str, str], str | Exception] | None = None,
) -> PollScope:
    """The group's (Gitea URL, scope, API token); raises PermanentError or TransientError if the token
    cannot be read. `cache` spares a second read of one Secret key in one cycle."""
    ref = spec.auth_token.secret_ref
    where = (namespace, ref.name, ref.key)
    cache = {} if cache is None else cache
    if where not in cache:
        try:
            cache[where] = await kube.secret_value(*where)
        except (PermanentError, TransientError) as exc:
            cache[where] = exc
    token = cache[where]
    if isinstance(token, Exception):
        raise token
    return PollScope(spec.gitea.url, spec.scope, "" if spec.scope == "global" else spec.target, token)


def owners(name: str, groups: Iterable[GroupObject]) -> list[GroupObject]:
    """The groups whose runner Jobs may be called `name`."""
    match = RUNNER_SUFFIX.search(name)
    if match is None:
        return []
    return [g for g in groups if job_name(g.name, match.group(1)) == name]


@dataclass
class RunnerRows:
    """Gitea's runner rows of our runners, for the controller."""

    gitea: GiteaClient
    kube: Kube
    metrics: Metrics
    busy_until: dict[tuple[str, str], float] = field(default_factory=dict)  # (namespace, Job) -> monotonic
    clock: Callable[[], float] = time.monotonic

    def busy(self, namespace: str, name: str) -> bool:
        """Whether Gitea called this runner busy in the last BUSY_HOLD seconds."""
        return self.busy_until.get((namespace, name), 0.0) > self.clock()

    async def vet(self, group: GroupObject, spec: RunnerGroupSpec, deletes: Sequence[Delete]) -> list[Delete]:
        """The deletions that may go ahead, each one's Gitea row removed first."""
        if not deletes:
            return []
        now = self.clock()
        self.busy_until = {k: t for k, t in self.busy_until.items() if t > now}  # expired, or runners gone
        label = f"{group.namespace}/{group.name}"
        surplus = [d for d in deletes if d.reason == "surplus_idle"]
        try:
            scope = await scope_of(self.kube, spec, group.namespace)
            listed = await self.gitea.runners(scope)
            running = await self._running_on(scope) if surplus else set()
        except (GiteaError, PermanentError, TransientError) as exc:
            if surplus:
                log.warning(
                    "runners kept: Gitea cannot say they are idle",
                    extra={"group": group.name, "namespace": group.namespace, "error": str(exc)},
                )
            return [d for d in deletes if d.reason != "surplus_idle"]
        rows = {r.name: r for r in listed.runners}
        # One short page is one SELECT: a name missing from it is missing from Gitea. Several pages can
        # miss a row without their count showing it (gitea_paging), so they never prove a runner gone.
        complete = listed.complete and len(listed.runners) < PAGE_SIZE
        allowed: list[Delete] = []
        for d in deletes:
            row = rows.get(d.name)
            if d.reason == "surplus_idle":
                if row is not None and (row.busy or row.id in running):
                    self.busy_until[(group.namespace, d.name)] = now + BUSY_HOLD
                    self.metrics.runners_kept_busy.labels(group=label).inc()
                    log.info("runner kept: Gitea says it is busy", extra={"group": group.name, "job": d.name})
                    continue
                if row is None and not complete:
                    continue  # not in a listing that may have moved under us: ask again next pass
            deleted = row is None or await self._delete(scope, row, label, reason=d.reason)
            if deleted or d.reason != "surplus_idle":  # a surplus runner whose row stays stays too
                allowed.append(d)
        return allowed

    async def _running_on(self, scope: PollScope) -> set[int]:
        """Ids of the runners Gitea lists an `in_progress` job on; GiteaError if the listing may have
        missed one (rows moved between its pages)."""
        listing = await self.gitea.jobs(scope)
        if not listing.complete:
            raise GiteaError("jobs listing incomplete: rows moved while it was read")
        return {p.job.runner_id for p in listing.jobs if p.job.status == "in_progress" and p.job.runner_id}

    async def _delete(self, scope: PollScope, row: ActionRunner, label: str, *, reason: str) -> bool:
        try:
            await self.gitea.delete_runner(scope, row.id)
        except GiteaError as exc:
            log.warning("runner row not deleted", extra={"runner": row.name, "id": row.id, "error": str(exc)})
            return False
        self.metrics.gitea_runners_removed.labels(group=label, reason=reason).inc()
        log.info("runner row deleted in gitea", extra={"runner": row.name, "id": row.id, "reason": reason})
        return True

    async def sweep(
        self,
        scopes: Mapping[PollScope, Sequence[GroupObject]],
        jobs: Mapping[tuple[str, str], JobObject],
        seated: Mapping[str, set[str]],
    ) -> int:
        """Delete the ghost rows of every scope (one listing per scope); how many were deleted.

        `jobs`: the runner Jobs by (namespace, name); `seated`: by group uid, the runner Jobs holding a
        seat (by any replica), which includes those being created that the cache does not show yet."""
        removed = 0
        for scope, groups in scopes.items():
            try:
                listed = await self.gitea.runners(scope)
            except GiteaError as exc:
                log.warning("ghost sweep: runners not listed", extra={"scope": repr(scope), "error": str(exc)})
                continue
            for row in listed.runners:
                if row.status != "offline" or row.busy:
                    continue
                mine = owners(row.name, groups)
                if not mine or any(
                    _alive(jobs.get((g.namespace, row.name))) or row.name in seated.get(g.uid, ()) for g in mine
                ):
                    continue
                # Groups of one name in several namespaces give runners names alike: the first one counts it.
                if await self._delete(scope, row, f"{mine[0].namespace}/{mine[0].name}", reason="ghost"):
                    removed += 1
        return removed


def _alive(job: JobObject | None) -> bool:
    return job is not None and not job.finished
