"""The fallback for missed webhooks, and the sweep of runner rows left in Gitea.

Owns: polling each distinct (Gitea URL, scope, token) once per cycle, with backoff on errors and at
least the Retry-After Gitea asks for; recording what it lists in Redis (`JobStore.sync_polled`:
Gitea's answer wins over records older than the poll, and a job is gone only after two complete
listings missed it); each group's `GiteaReachable` condition; and the periodic ghost sweep.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

from reconciler.decide.gitea_health import poll_failed
from reconciler.decide.instances import instance_of
from reconciler.decide.status import Condition, timestamp
from reconciler.gitea.api import GiteaClient, GiteaError, PollScope
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.retiring import ghosts
from reconciler.loop.retiring.vetting import RunnerRows
from reconciler.loop.rounds.group_views import contained
from reconciler.loop.scopes import scope_of
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from reconciler.settings import Settings
from webhook_scaler.store.jobs.model import ALL, JobUpdate, Scope
from webhook_scaler.store.jobs.records import JobStore
from webhook_scaler.store.seats.coordination import Coordination

log = logging.getLogger(__name__)
Views = Callable[[], Iterable[tuple[GroupObject, RunnerGroupSpec | None, str]]]


class Poller:
    """Polls Gitea for the groups the controller knows, and sweeps their ghosts."""

    def __init__(
        self,
        settings: Settings,
        *,
        kube: Kube,
        store: JobStore,
        coordination: Coordination,
        gitea: GiteaClient,
        rows: RunnerRows,
        views: Views,
        state_of: Callable[[GroupObject], GroupState],
        wake: Callable[[], None],
        jobs: Callable[[], Mapping[tuple[str, str], JobObject]],
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.store = store
        self.coordination = coordination
        self.gitea = gitea
        self.rows = rows
        self.views = views
        self.state_of = state_of
        self.wake = wake
        self.metrics = metrics
        self.jobs = jobs  # the runner Jobs cache now, by (namespace, name): a cache replaces its map on relist

    async def poll_forever(self) -> None:
        """Poll every `poll_interval` (with jitter), backing off while polls fail."""
        delay = self.settings.poll_interval
        while True:
            try:
                retry_after = await self.poll_once()
            except Exception:  # never let one bad cycle stop the fallback for good
                log.exception("poll cycle failed")
                retry_after = 0.0
            if retry_after is None:
                delay = self.settings.poll_interval
            else:  # back off on errors, and at least as long as a 429's Retry-After asks
                delay = min(max(delay * 2, 5.0, retry_after), self.settings.poll_backoff_max)
            jitter = 1 + self.settings.poll_jitter * (2 * random.random() - 1)
            await asyncio.sleep(delay * jitter)

    async def poll_once(self) -> float | None:
        """Poll each distinct (Gitea URL, scope, token) once and reconcile Redis with what Gitea lists.

        Returns None if every poll succeeded, else the longest Retry-After Gitea asked for (0 if none).
        """
        scopes = await self.scopes()
        results = await asyncio.gather(*(self._poll_scope(s, gs) for s, gs in scopes.items()))
        self.wake()
        failures = [r for r in results if r is not None]
        return max(failures) if failures else None

    async def scopes(self) -> dict[PollScope, list[GroupObject]]:
        """The valid groups by (Gitea URL, scope, token), each Secret key read once; a group whose token
        cannot be read gets the condition that says so."""
        scopes: dict[PollScope, list[GroupObject]] = {}
        tokens: dict[tuple[str, str, str], str | Exception] = {}
        for group, spec, _ in self.views():
            if spec is None:
                continue
            try:
                scope = await scope_of(self.kube, spec, group.namespace, cache=tokens)
            except (PermanentError, TransientError) as exc:
                self.state_of(group).gitea = Condition("GiteaReachable", "False", "AuthTokenUnavailable", str(exc))
                continue
            except Exception as exc:  # one group's token or spec never stops the poll of the others
                message = contained(self.metrics, group, "poll", exc)
                self.state_of(group).gitea = Condition("GiteaReachable", "Unknown", "PollFailed", message)
                continue
            scopes.setdefault(scope, []).append(group)
        return scopes

    async def _poll_scope(self, scope: PollScope, groups: list[GroupObject]) -> float | None:
        store = self.store.of(instance_of(scope.url, self.settings.instances))  # its instance's records
        try:
            started_ms = await store.now_ms()
            listing = await self.gitea.jobs(scope)
            updates = [JobUpdate.from_job(p.job, repo_full_name=p.repo) for p in listing.jobs]
            redis_scope = (
                ALL if scope.kind == "global" else Scope("repo" if scope.kind == "repo" else "owner", scope.target)
            )
            added, dropped = await store.sync_polled(
                redis_scope, updates, polled_since_ms=started_ms, complete=listing.complete, repos=listing.repos
            )
            condition = Condition("GiteaReachable", "True", "PollSucceeded", f"{len(updates)} queued or running job(s)")
            failure: float | None = None
            if added or dropped:
                log.info("poll healed redis", extra={"scope": repr(scope), "added": added, "dropped": dropped})
        except GiteaError as exc:
            condition = await self._failed(scope, exc)
            failure = exc.retry_after
            log.warning("poll failed", extra={"scope": repr(scope), "error": str(exc), "status": exc.status})
        except Exception as exc:  # e.g. Redis failing: the poll told nothing, and the group must say so
            condition = Condition("GiteaReachable", "Unknown", "PollFailed", f"the poll failed: {type(exc).__name__}")
            failure = 0.0
            log.exception("poll failed", extra={"scope": repr(scope)})
        checked = timestamp(datetime.now(UTC))
        for group in groups:
            state = self.state_of(group)
            state.gitea = condition
            state.last_poll = checked
        return failure

    async def _failed(self, scope: PollScope, exc: GiteaError) -> Condition:
        """Why the poll of `scope` failed, in the user's terms (`gitea_health`): after a 404, Gitea's
        version tells an old Gitea from a scope it does not have."""
        version = None
        if exc.status == 404:
            try:
                version = await self.gitea.version(scope)
            except GiteaError:
                version = None
        where = f"{scope.kind} {scope.target}".strip()
        return poll_failed(status=exc.status, error=str(exc), where=where, version=version)

    async def sweep_forever(self) -> None:
        """Sweep every `ghost_sweep_interval`."""
        while True:
            await asyncio.sleep(self.settings.ghost_sweep_interval)
            try:
                await self.sweep_once()
            except Exception:  # the next sweep tries again
                log.exception("ghost sweep failed")

    async def sweep_once(self) -> int:
        """Delete the runner rows in Gitea that runners of ours left behind; how many."""
        scopes = await self.scopes()
        seated: dict[str, set[str]] = {}
        for groups in scopes.values():
            for g in groups:
                seated[g.uid] = set((await self.coordination.seats(g.uid)).held)
        return await ghosts.sweep(self.rows, scopes, self.jobs(), seated)
