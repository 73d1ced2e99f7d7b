"""One group's seats during a pass: the cap on its runners, enforced in Redis (see `coordination`).

Owns: the start of a pass (its lease, seats and runner activity in one round trip while the epoch
holds), seating the group's active runner Jobs once per seat epoch (after waiting out creates of an
older epoch that may still land), freeing the seats of Jobs that ended, reclaiming the seats of Jobs
that were never created, and the create path itself: take the job's claim and a seat in one step,
register the runner (a slow Register renews the seat), send the create at once, treat 409 as
"already there", confirm the claims of a pass's runners.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.decide.instances import instance_of
from reconciler.decide.plan import Create
from reconciler.decide.status import SEAT_EPOCH
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.egress import DIRECT, Egress
from reconciler.kube.manifests import build_job
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.kube.placement import UNPINNED, Placement
from reconciler.kube.runner_cache import SECRET_KEY
from reconciler.loop.passes.registrations import Registrations
from reconciler.loop.state import GroupState
from reconciler.model.names import group_key, next_runner_name, runner_job, runner_name
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.store.seats.coordination import (
    ABANDONED_AFTER_S,
    CLAIM_PENDING_S,
    CREATE_DEADLINE_S,
    RECLAIM_AFTER_S,
    Coordination,
)
from webhook_scaler.store.seats.model import Activity, Seats

log = logging.getLogger(__name__)
SHARE_EVERY_S = 300.0
RENEW_AFTER_S = CREATE_DEADLINE_S / 2  # a Register slower than this renews the seat before the create


@dataclass(frozen=True, slots=True)
class Ready:
    """The seats a pass starts from: which seated runners the cache does not show yet, the epoch, and,
    while creates of an older epoch may still land, when creating may resume (Redis ms)."""

    in_flight: frozenset[str]
    epoch: str
    wait_until_ms: int | None = None
    now_ms: int = 0


class Seating:
    """Seats and creates for the groups of one controller."""

    def __init__(
        self,
        coordination: Coordination,
        kube: Kube,
        registrations: Registrations,
        *,
        claim_ttl_s: float,
        replica: str = "",
        egress: Egress = DIRECT,
        named: Mapping[str, str] | None = None,
        placement: Placement = UNPINNED,
    ) -> None:
        self.coordination = coordination
        self.named = named or {}  # the named Gitea instances (`instances`): each one's claims are its own
        self.registrations = registrations
        self.egress = egress  # how its runners reach Gitea
        self.placement = placement  # where they run: the admin's nodeSelector and tolerations
        self.kube = kube
        self.claim_ttl_ms = int(claim_ttl_s * 1000)
        self.taker = f"{replica or 'reconciler'}/{uuid.uuid4().hex[:12]}"  # this process, for its seats
        self._shared: dict[str, float] = {}  # runner namespace -> when its cache Secret was last made right

    def of(self, spec: RunnerGroupSpec) -> Coordination:
        """The coordination of the jobs of the Gitea instance the group serves."""
        return self.coordination.of(instance_of(spec.gitea.url, self.named))

    async def prepare(
        self,
        group: GroupObject,
        spec: RunnerGroupSpec,
        jobs: Sequence[JobObject],
        state: GroupState,
        *,
        lease: tuple[str, int] | None,
        runners: Sequence[str],
        queued: Sequence[int],
        lingering: frozenset[str] = frozenset(),
    ) -> tuple[Ready, Activity] | None:
        """Take the pass's lease (holder, ttl ms; None: none), bring the group's seats up to date with
        what the cache shows (see the module doc), and read Gitea's word on `runners` and which of the
        `queued` job ids still are queued. None: another replica has the lease. One round trip while
        this replica has seated the group in the current epoch; the long way (`_seat`) otherwise.
        `lingering`: runner Jobs gone from the cache whose Pods are not (they still hold their seats)."""
        present = {j.name for j in jobs} | lingering
        gone = [n for n in state.deleting if n not in present]  # deleted by us, Pods and all: free
        ended = [j.name for j in jobs if j.finished and (state.seated is None or j.name in state.seated)]
        seat = [j.name for j in jobs if not j.finished and j.name not in state.deleting]
        coordination = self.of(spec)
        begun = await coordination.begin(
            group.uid, lease=lease, epoch=state.epoch, free=ended + gone, seat=seat, runners=runners, jobs=queued
        )
        if not begun.leased:
            return None
        if begun.seats is None or begun.activity is None:
            ready = await self._seat(group, jobs, state, present=present, gone=gone, claims=coordination)
            state.deleting.difference_update(gone)
            return ready, await coordination.activity(runners, jobs=queued)
        state.deleting.difference_update(gone)
        settled = await self._settle(group, state, begun.seats, state.epoch, present=present, claims=coordination)
        return settled, begun.activity

    async def _seat(
        self,
        group: GroupObject,
        jobs: Sequence[JobObject],
        state: GroupState,
        *,
        present: set[str],
        gone: list[str],
        claims: Coordination,
    ) -> Ready:
        """The seats of a group this replica has not seated in the current epoch (first pass, or Redis
        lost the seats): wait out creates of an older epoch, seat the active Jobs, record the epoch."""
        epoch = await self.coordination.epoch(new_id=uuid.uuid4().hex[:12])
        fresh = state.epoch != epoch.id  # this replica has not seated the group's Jobs in this epoch
        recorded = await self.kube.seat_epoch(group.ref) if fresh else epoch.id
        if recorded not in (None, epoch.id) and epoch.now_ms < epoch.started_ms + RECLAIM_AFTER_S * 1000:
            # Redis lost the seats: creates granted before may still land. Wait them out.
            wait = epoch.started_ms + int(RECLAIM_AFTER_S * 1000)
            return Ready(frozenset(), epoch.id, wait_until_ms=wait, now_ms=epoch.now_ms)
        ended = [j.name for j in jobs if j.finished and (fresh or state.seated is None or j.name in state.seated)]
        adopt = [j.name for j in jobs if not j.finished and j.name not in state.deleting] if fresh else []
        seats = await self.coordination.seats(group.uid, free=ended + gone, adopt=adopt)
        if recorded != epoch.id:
            await self.kube.patch_status(group.ref, {SEAT_EPOCH: epoch.id})
        state.epoch = epoch.id
        return await self._settle(group, state, seats, epoch.id, present=present, claims=claims)

    async def _settle(
        self,
        group: GroupObject,
        state: GroupState,
        seats: Seats,
        epoch: str,
        *,
        present: set[str],
        claims: Coordination,
    ) -> Ready:
        """Free the seats of Jobs that were never created (see the module doc): those older than
        `RECLAIM_AFTER_S`, and sooner those whose taker is dead for sure; and remember the seats. A silent
        taker (`Abandoned`) may be paused between its deadline and its create, which lands when it
        resumes: its seat stays, so that create never lifts the cap, but its job's claim goes, and the
        job is taken again under the same Job name, in the same seat (one of the two creates gets a 409)."""
        unseen = {n: at for n, at in seats.held.items() if n not in present and n not in state.deleting}
        old = [n for n, at in unseen.items() if at < seats.now_ms - RECLAIM_AFTER_S * 1000]
        young = [n for n, at in unseen.items() if n not in old and at < seats.now_ms - ABANDONED_AFTER_S * 1000]
        abandoned = await self.coordination.abandoned(group.uid, young)
        orphans = [n for n in old + abandoned.dead if not await self.kube.job_exists(group.namespace, n)]
        if orphans:
            log.warning("seats of runner Jobs never created freed", extra={"group": group.name, "jobs": orphans})
            after = RECLAIM_AFTER_S if set(orphans) <= set(old) else ABANDONED_AFTER_S
            seats = await self.coordination.seats(group.uid, orphans=orphans, orphaned_after_s=after)
        silent = [(job, n) for n in abandoned.silent if (job := runner_job(n)) is not None]
        await claims.release_all(silent)
        state.seated = set(seats.held)
        retaken = present | {n for _, n in silent}
        return Ready(frozenset(n for n in seats.held if n not in retaken), epoch, now_ms=seats.now_ms)

    @staticmethod
    def name_for(group: GroupObject, c: Create, jobs: Sequence[JobObject], *, taken: Iterable[str] = ()) -> str:
        """The runner Job's name (`next_runner_name`), after those in the cache and `taken` (deleted, their
        Pods still going)."""
        before = [j.name for j in jobs] + ([c.stale_claim] if c.stale_claim else []) + list(taken)
        return next_runner_name(group.name, c.job_id, attempt=c.attempt, before=before, random_hex=uuid.uuid4().hex)

    async def create(self, group: GroupObject, spec: RunnerGroupSpec, c: Create, name: str, epoch: str) -> str:
        """Start one runner: "created", "exists" (409: it is there already) or why not ("claimed", "full",
        "epoch", "late"). The claim of a runner that exists is the caller's to confirm (`confirm`)."""
        started = time.monotonic()
        await self.share_cache_secret(group.namespace)
        runner = runner_name(name, group=group_key(group.namespace, group.name))
        taken = await self._take(group, spec, c, (name, runner), epoch)
        if taken != "granted":
            return taken  # nothing was taken
        body = build_job(group.ref, spec, name=name, job_id=c.job_id, queued_ms=c.queued_ms, runner=runner,
                         egress=self.egress, placement=self.placement, about=c.about)  # fmt: skip
        file, started = await self._register(group, spec, c, (name, runner), started)
        if file is None:
            return "late"
        try:
            late = time.monotonic() - started > CREATE_DEADLINE_S
            uid = None if late else await self.kube.create_job(body)
            outcome = "late" if late else "created" if uid else "exists"
            if uid:
                await self._hand_over(body, uid, file)
        except PermanentError:
            await self._drop(group, spec, c, name)  # refused: no such Job exists
            raise
        except TransientError as exc:
            if exc.refused:  # turned down before anything was written: its seat is free again at once
                await self._drop(group, spec, c, name)
            else:
                await self._unclaim(spec, c, name)  # the seat stays: the create may have landed
            raise
        except BaseException:
            await self._unclaim(spec, c, name)  # the seat stays: the create may have landed
            raise
        if outcome == "late":
            await self._drop(group, spec, c, name)
        return outcome

    async def _register(
        self, group: GroupObject, spec: RunnerGroupSpec, c: Create, names: tuple[str, str], started: float
    ) -> tuple[str | None, float]:
        """Register the runner (`names`: its Job's, its own) with Gitea: its `.runner` file, and when its
        create's deadline began (monotonic). A Register that took longer than `RENEW_AFTER_S` renews the
        seat, and the deadline begins again; None if the seat or claim was lost meanwhile. A runner
        registered but never started leaves an idle row, which the ghost sweep deletes."""
        try:
            file = await self.registrations.register(group.namespace, spec, names[1])
        except BaseException:
            await self._drop(group, spec, c, names[0])  # nothing was created
            raise
        if time.monotonic() - started <= RENEW_AFTER_S:
            return file, started
        renewed = time.monotonic()
        if await self.of(spec).renew(group.uid, names[0], taker=self.taker, job_id=c.job_id) != "granted":
            await self._drop(group, spec, c, names[0])  # gives back what is still this replica's only
            return None, renewed
        return file, renewed

    async def _take(
        self, group: GroupObject, spec: RunnerGroupSpec, c: Create, names: tuple[str, str], epoch: str
    ) -> str:
        """Take the job's claim (after releasing a stale one) and a seat in one step (`coordination`),
        binding the runner's name (`names`: the Job's, the runner's) to the owner the group serves."""
        coordination = self.of(spec)
        if c.job_id is not None and c.stale_claim:
            await coordination.release(c.job_id, holder=c.stale_claim)
        return await coordination.take(
            group.uid,
            names[0],
            maximum=spec.max_active_runners,
            epoch=epoch,
            taker=self.taker,
            job_id=c.job_id,
            claim_ttl_ms=int((CLAIM_PENDING_S + self.registrations.timeout_s) * 1000),  # it lasts through the register
            runner=(names[1], spec.target.split("/", 1)[0]),
        )

    async def share_cache_secret(self, namespace: str) -> None:
        """Keep the cache server's secret in the runner namespace's Secret, which its runners read: made
        or mended before the first runner there, then again every few minutes (a rotated secret, a
        deleted Secret)."""
        cache = self.egress.cache
        if not cache or not cache.secret or time.monotonic() - self._shared.get(namespace, -1e9) < SHARE_EVERY_S:
            return
        await self.kube.ensure_secret_key(namespace, cache.secret_name, SECRET_KEY, lambda: cache.secret, replace=True)
        self._shared[namespace] = time.monotonic()

    async def _hand_over(self, body: dict[str, Any], uid: str, file: str) -> None:
        """Give the new runner Job its credential; if that fails, the Job goes (its Pod would wait for the
        Secret until its pending timeout)."""
        try:
            await self.registrations.hand_over(body, uid, file)
        except BaseException:
            meta = body["metadata"]
            with contextlib.suppress(Exception):
                await self.kube.delete_job(meta["namespace"], meta["name"])
            raise

    async def confirm(self, spec: RunnerGroupSpec, outcomes: Iterable[tuple[Create, str, object]]) -> None:
        """Make the claims of runners that exist now (create outcomes "created" or "exists") last the
        claim TTL: one round trip for a pass's creates."""
        claims = [(c.job_id, n) for c, n, r in outcomes if c.job_id is not None and r in ("created", "exists")]
        await self.of(spec).confirm(claims, ttl_ms=self.claim_ttl_ms)

    async def _drop(self, group: GroupObject, spec: RunnerGroupSpec, c: Create, name: str) -> None:
        """Give back the seat and claim of a runner Job that was not and will not be created, unless another
        replica took the job, and so the seat, again since (`Coordination.give_back`)."""
        await self.of(spec).give_back(group.uid, name, taker=self.taker, job_id=c.job_id)

    async def _unclaim(self, spec: RunnerGroupSpec, c: Create, name: str) -> None:
        if c.job_id is not None:
            await self.of(spec).release(c.job_id, holder=name)
