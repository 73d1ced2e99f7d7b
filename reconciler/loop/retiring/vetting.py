"""Gitea's own word on our runners: no runner Job is deleted until Gitea says it runs no job.

Owns which runner Job deletions may go ahead, and the runner rows our runners leave in Gitea (disabled,
then deleted with their runner). The rows left behind are `ghosts`'.

Every deletion, whatever its reason, goes through one protocol (`RunnerRows.vet`):
1. **Find the row** (`rows`). The group's scope is listed; a runner missing from it is looked
   for in the wider scopes its API token can list (a repository's owner, then the instance): runners
   registered with an org token while the group serves one repository are org runners. The token is
   read from the group's Secret (`tokens`: a group being deleted with it uses the one last read).
2. **Busy stays.** A row Gitea calls `busy`, or that an `in_progress` job of its scope names, is kept,
   and counts as busy for `BUSY_HOLD` seconds without asking again.
3. **Disable, wait, ask again.** An idle row is disabled (`PATCH`, Gitea >= 1.26): Gitea hands a
   disabled runner no job. A fetch that read the runner just before the disable may still hand it
   one, so after `settle` seconds the scope's `in_progress` jobs are read again; a runner that took a
   job is kept (disabled, it runs that job to its end and exits). Only then is the row deleted, and
   the Job after it. A Gitea without the call (405) gets the row deleted at once, as before 1.26.
4. **No row.** A runner whose Pod never ran (`pending_timeout`) or whose job is over (`job_over`,
   Gitea removes an ephemeral runner's row with its job) goes when the group's scope does not list it.
   A surplus idle runner goes only when no scope its token can list holds its row; otherwise it is
   kept and reported `unlisted`: it registered where the group cannot see it (the registration token's
   scope is not the group's), and Gitea cannot say it is idle. Which listings prove a row missing,
   however many pages they take, is `rows`'.
Gitea unreachable, a listing that moved under us, a refused call: the runner is kept and asked about
later, and `Vetted` says why (`unanswered`: whether asking again can help, for a drain to give up on).
A runner disabled but not confirmed idle stays due for deletion (`retiring`); one this process never
disabled (it restarted, or another replica did) is found disabled in Gitea and put back
(`deletions`' recall).

Must not touch Redis; Kubernetes only through the cache and `Kube.secret_value`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from reconciler.decide.plan import Delete
from reconciler.gitea.api import GiteaClient, GiteaError, PollScope
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.objects import GroupObject
from reconciler.loop.retiring.rows import Found, find
from reconciler.loop.retiring.tokens import Tokens
from reconciler.metrics import Metrics
from reconciler.model.names import job_of_runner
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.gitea import ActionRunner

log = logging.getLogger(__name__)
BUSY_HOLD = 30.0  # seconds a runner Gitea called busy counts as busy without asking again
SETTLE = 1.0  # seconds from disabling runners to asking again whether one took a job meanwhile
REFUSING = frozenset({401, 403, 404})  # Gitea refuses the token (401, 403) or knows no such scope (404)


def unanswered(exc: BaseException) -> str:
    """What a failure to ask Gitea about a group's runners bodes: "refused" (asking again will not help:
    the group's API token cannot be read, or Gitea answers 401, 403 or 404), "unreachable" (no answer,
    or a server error), else "" (a hiccup: ask again)."""
    if isinstance(exc, PermanentError) or (isinstance(exc, GiteaError) and exc.status in REFUSING):
        return "refused"
    if isinstance(exc, GiteaError) and (exc.status is None or exc.status >= 500):
        return "unreachable"
    return ""


@dataclass(frozen=True, slots=True)
class Vetted:
    """The deletions that may go ahead (each one's row gone from Gitea), and the runners kept because
    no scope the group can list holds their row."""

    allowed: list[Delete]
    unlisted: list[str] = field(default_factory=list)
    unasked: str = ""  # why Gitea could not be asked ("": it was)
    outlook: str = ""  # and what that bodes (`unanswered`)


@dataclass
class RunnerRows:
    """Gitea's runner rows of our runners, for the controller."""

    gitea: GiteaClient
    kube: Kube
    metrics: Metrics
    busy_until: dict[tuple[str, str], float] = field(default_factory=dict)  # (namespace, Job) -> monotonic
    clock: Callable[[], float] = time.monotonic
    settle: float = SETTLE
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep
    retiring: dict[tuple[str, str], Delete] = field(default_factory=dict)  # (group uid, Job): disabled, unconfirmed
    tokens: Tokens = field(init=False)  # the groups' API tokens, kept for their drains
    # (Gitea, scope kind, target) -> the ids of the rows the last sweep of that scope found ghosts
    suspects: dict[tuple[str, str, str], set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tokens = Tokens(self.kube)

    def forget(self, uid: str) -> None:
        """Drop what is kept of a group that is gone."""
        self.tokens.forget(uid)
        for key in [k for k in self.retiring if k[0] == uid]:
            del self.retiring[key]

    def busy(self, namespace: str, name: str) -> bool:
        """Whether Gitea called this runner busy in the last BUSY_HOLD seconds."""
        return self.busy_until.get((namespace, name), 0.0) > self.clock()

    def still_retiring(self, group: GroupObject, alive: Collection[str]) -> list[Delete]:
        """The group's runners that were disabled but not yet confirmed idle, of those still `alive`."""
        for key in [k for k in self.retiring if k[0] == group.uid and k[1] not in alive]:
            del self.retiring[key]
        return [d for (uid, _), d in self.retiring.items() if uid == group.uid]

    async def vet(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec,
        deletes: Sequence[Delete],
        runners: Mapping[str, str] = MappingProxyType({}),
        *,
        fallback: RunnerGroupSpec | None = None,
    ) -> Vetted:
        """The deletions that may go ahead, each one's Gitea row disabled, confirmed idle and removed first;
        looked for where `spec` says, or where `fallback` does if Gitea cannot be asked there. `runners`:
        the runner's name in Gitea by runner Job (default: the Job's own)."""
        if not deletes:
            return Vetted([])
        now = self.clock()
        self.busy_until = {k: t for k, t in self.busy_until.items() if t > now}  # expired, or runners gone
        label = f"{group.namespace}/{group.name}"
        named, found = {d.name: runners.get(d.name, d.name) for d in deletes}, None
        try:
            scope = await self.tokens.scope(group, spec)
            found = await self.find(scope, set(named.values()))
            running = await self._running({s for s, _ in found.rows.values()})
        except (GiteaError, PermanentError, TransientError) as exc:
            if fallback is not None:
                log.warning(
                    "runners registered where Gitea cannot be asked", extra={"group": group.name, "error": str(exc)}
                )
                return await self.vet(group, fallback, deletes, runners)
            return self._unasked(group, deletes, exc, rows_listed=found is not None)
        allowed, unlisted, idle = self._sort(group, deletes, named, found, running, now=now)
        if unlisted:
            self._kept(group, unlisted, "unlisted", "runners kept: no scope the group's token can list holds their row")
        allowed += await self._retire(group, idle, label)
        for d in allowed:
            self.retiring.pop((group.uid, d.name), None)
        return Vetted(allowed, unlisted)

    def _unasked(self, group: GroupObject, deletes: Sequence[Delete], exc: Exception, *, rows_listed: bool) -> Vetted:
        """Nothing goes: Gitea could not be asked about these runners; why, and what that bodes. A 404 once
        the rows were listed is the jobs listing of a Gitea without it (before 1.25), not a scope gone."""
        names = [d.name for d in deletes]
        self._kept(group, names, "unconfirmed", "runners kept: Gitea cannot say they are idle", exc)
        no_jobs_api = rows_listed and isinstance(exc, GiteaError) and exc.status == 404
        return Vetted([], unasked=str(exc), outlook="" if no_jobs_api else unanswered(exc))

    def _sort(
        self,
        group: GroupObject,
        deletes: Sequence[Delete],
        named: Mapping[str, str],
        found: Found,
        running: set[int],
        *,
        now: float,
    ) -> tuple[list[Delete], list[str], list[tuple[Delete, PollScope, ActionRunner]]]:
        """The deletions that may go at once (no row), the runners kept as `unlisted`, and the idle rows
        to retire; busy ones are left out (and held busy). `named`: the runner's name in Gitea by Job."""
        allowed: list[Delete] = []
        unlisted: list[str] = []
        idle: list[tuple[Delete, PollScope, ActionRunner]] = []
        for d in deletes:
            runner = named[d.name]
            where = found.rows.get(runner)
            if where is not None:
                if not self._busy(group, where[1], running, now=now):
                    idle.append((d, *where))
            elif runner in found.absent or (d.reason != "surplus_idle" and runner in found.missing_here):
                allowed.append(d)
            else:
                unlisted.append(d.name)
        return allowed, unlisted, idle

    def _busy(self, group: GroupObject, row: ActionRunner, running: set[int], *, now: float) -> bool:
        """Whether Gitea says the runner runs a job; if so it counts as busy for BUSY_HOLD seconds."""
        if not (row.busy or row.id in running):
            return False
        self.busy_until[(group.namespace, row.name)] = now + BUSY_HOLD
        self.retiring.pop((group.uid, job_of_runner(row.name)), None)
        self.metrics.runners_kept_busy.labels(group=f"{group.namespace}/{group.name}").inc()
        log.info("runner kept: Gitea says it is busy", extra={"group": group.name, "job": row.name})
        return True

    def _kept(self, group: GroupObject, names: Sequence[str], reason: str, message: str, exc: object = "") -> None:
        self.metrics.runners_kept.labels(group=f"{group.namespace}/{group.name}", reason=reason).inc(len(names))
        extra = {"group": group.name, "namespace": group.namespace, "runners": ", ".join(names)}
        log.warning(message, extra={**extra, "error": str(exc)} if exc else extra)

    async def _retire(
        self, group: GroupObject, idle: Sequence[tuple[Delete, PollScope, ActionRunner]], label: str
    ) -> list[Delete]:
        """Disable idle rows, wait for fetches begun before, and delete the rows no job went to."""
        allowed: list[Delete] = []
        disabled: list[tuple[Delete, PollScope, ActionRunner]] = []
        for d, scope, row in idle:
            try:
                now_row = await self.gitea.disable_runner(scope, row.id)
            except GiteaError as exc:
                if exc.status == 405 and await self.delete_row(scope, row, label, reason=d.reason):
                    allowed.append(d)  # a Gitea before 1.26: no disabling, the row goes at once
                elif exc.status != 405:
                    self._kept(group, [d.name], "unconfirmed", "runner kept: Gitea refused to disable it", exc)
                continue
            if now_row is None:  # gone already: Gitea removed it with its job
                allowed.append(d)
                continue
            if self._busy(group, now_row, set(), now=self.clock()):  # it took a job before the disable
                continue
            self.retiring[(group.uid, d.name)] = d
            self.metrics.runners_disabled.labels(group=label).inc()
            log.info("runner disabled in gitea", extra={"runner": row.name, "id": row.id, "reason": d.reason})
            disabled.append((d, scope, now_row))
        if not disabled:
            return allowed
        await self.sleep(self.settle)
        try:
            running = await self._running({s for _, s, _ in disabled})
        except GiteaError as exc:
            self._kept(group, [d.name for d, _, _ in disabled], "unconfirmed", "runners kept disabled", exc)
            return allowed
        now = self.clock()
        for d, scope, row in disabled:
            if not self._busy(group, row, running, now=now) and await self.delete_row(
                scope, row, label, reason=d.reason
            ):
                allowed.append(d)
        return allowed

    async def find(self, scope: PollScope, names: set[str]) -> Found:
        """Where the rows of `names` are (`gitea_rows.find`); GiteaError if the group's scope cannot be listed."""
        return await find(self.gitea, scope, names)

    async def _running(self, scopes: Iterable[PollScope]) -> set[int]:
        """Ids of the runners Gitea lists an `in_progress` job on in these scopes; GiteaError if a listing
        may have missed one (rows moved between its pages)."""
        out: set[int] = set()
        for scope in scopes:
            listing = await self.gitea.jobs(scope)
            if not listing.complete:
                raise GiteaError("jobs listing incomplete: rows moved while it was read")
            out |= {p.job.runner_id for p in listing.jobs if p.job.status == "in_progress" and p.job.runner_id}
        return out

    async def delete_row(self, scope: PollScope, row: ActionRunner, label: str, *, reason: str) -> bool:
        """Delete one runner row (counted for the group `label`, by `reason`); False if Gitea refused."""
        try:
            await self.gitea.delete_runner(scope, row.id)
        except GiteaError as exc:
            log.warning("runner row not deleted", extra={"runner": row.name, "id": row.id, "error": str(exc)})
            return False
        self.metrics.gitea_runners_removed.labels(group=label, reason=reason).inc()
        log.info("runner row deleted in gitea", extra={"runner": row.name, "id": row.id, "reason": reason})
        return True
