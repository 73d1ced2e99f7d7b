"""A deleted RunnerGroup's way out: its finalizer holds the group until its runners are done, and never
longer than the drain timeout.

Owns the finalizer `gitea.bpg.pw/runners`: added to every group the controller serves, removed once a
deleted group has no runner Job left running and Gitea lists no row of its runners. While the group is
being deleted its passes start no runner and delete every runner that took no job, each through Gitea
first (`vetting`); busy runners run their jobs to the end. Deciding what to delete is `plan`'s
(`draining`); this module holds, lets go, and says when Gitea is asked no more:

- **Abandoned.** Gitea cannot be asked about the group's runners for good (its API token cannot be read
  and none was kept, see `tokens`; Gitea answers 401, 403 or 404), or has answered none of the
  drain's calls for `GONE_AFTER_S` (switched off): a `DrainAbandoned` Warning Event says so once, the
  runners not known busy are deleted without asking Gitea (`deletions`), those known busy (from Redis:
  webhooks, polls) run on until the deadline, and the group goes once none runs. Their rows stay in
  Gitea: an ephemeral runner that took no job keeps its row until someone deletes it there.
- **The deadline.** `GRS_DRAIN_TIMEOUT` seconds after the group's deletionTimestamp the finalizer goes
  whatever is left, with a `DrainTimedOut` Warning Event naming it: the runner Jobs still running (garbage
  collection deletes them: a busy one loses its job) and the rows Gitea last called busy or could not
  be asked about.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from reconciler.gitea.api import GiteaError
from reconciler.kube.api import Kube, PermanentError
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.retiring import ghosts
from reconciler.loop.retiring.vetting import RunnerRows, Vetted, unanswered
from reconciler.model.spec import RunnerGroupSpec

log = logging.getLogger(__name__)
FINALIZER = "gitea.bpg.pw/runners"
LET_GO_KEPT_S = 600.0  # how long a group let go is remembered: its cache copy is gone well before
GONE_AFTER_S = 300.0  # Gitea answering none of a drain's calls this long counts as switched off


async def hold(kube: Kube, group: GroupObject) -> None:
    """Give a served group the finalizer, unless it has it or is being deleted already."""
    if group.deleting or FINALIZER in group.finalizers:
        return
    if group.finalizers:  # after the others, as long as they are what the cache shows
        current = list(group.finalizers)
        ops = [{"op": "test", "path": "/metadata/finalizers", "value": current}]
        ops.append({"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER})
    else:  # (a finalizer another controller adds in the same moment is lost: it adds it again)
        ops = [{"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]}]
    await kube.patch_finalizers(group.ref, ops)


async def let_go(kube: Kube, group: GroupObject) -> None:
    """Remove the finalizer: the API server then deletes the group, and garbage collection its Jobs."""
    if FINALIZER in group.finalizers:
        at = f"/metadata/finalizers/{group.finalizers.index(FINALIZER)}"
        await kube.patch_finalizers(
            group.ref, [{"op": "test", "path": at, "value": FINALIZER}, {"op": "remove", "path": at}]
        )
        log.info("runner group drained", extra={"group": group.name, "namespace": group.namespace})


@dataclass
class _Memo:
    """What one deleted group's drain has learnt, in this process."""

    seen: float | None = None  # when this process first saw it deleted: the deadline's start if none is known
    abandoned: str = ""  # why Gitea is asked no more ("": it is asked)
    failing_since: float | None = None  # since when Gitea has answered none of the drain's calls
    error: str = ""  # the last call that failed
    heard: Vetted | None = None  # this pass's vetting of the group's deletions, if it had any
    busy: list[str] = field(default_factory=list)  # the rows of its runners Gitea last called busy
    timed_out: bool = False  # its DrainTimedOut Event is sent


class Drain:
    """The drains of the deleted groups of one controller."""

    def __init__(self, kube: Kube, rows: RunnerRows) -> None:
        self.kube = kube
        self.rows = rows
        self.memos: dict[str, _Memo] = {}  # by group uid
        # the groups this process let go, and when: until the cache sees one gone, a pass on its stale copy
        # (finalizer and all) is told it is done, and asks nothing (its token is forgotten by then)
        self.let_go_at: dict[str, float] = {}

    def abandoned(self, group: GroupObject) -> bool:
        """Whether Gitea is asked no more about the deleted group's runners."""
        memo = self.memos.get(group.uid)
        return memo is not None and bool(memo.abandoned)

    def heard(self, group: GroupObject, vetted: Vetted) -> None:
        """Note how this pass's vetting of the deleted group's deletions went, for `finish` to judge."""
        self.memos.setdefault(group.uid, _Memo()).heard = vetted

    async def finish(
        self, group: GroupObject, spec: RunnerGroupSpec, jobs: Sequence[JobObject], *, now: float, drain_timeout: float
    ) -> bool:
        """Let the deleted group go once no runner Job of it runs and the rows Gitea lists of its runners
        are deleted, or once none runs and Gitea is asked no more, or at the deadline (`now`: seconds since
        the epoch; `drain_timeout`: GRS_DRAIN_TIMEOUT). False: look again shortly. GiteaError: Gitea did not
        answer (the pass is retried with backoff)."""
        if group.uid in self.let_go_at:
            return True
        memo = self.memos.setdefault(group.uid, _Memo())
        memo.seen = now if memo.seen is None else memo.seen
        deadline = (group.deleted_ms / 1000 if group.deleted_ms else memo.seen) + drain_timeout
        left = sorted(j.name for j in jobs if not j.finished)
        if now >= deadline:
            await self._time_out(group, memo, left, drain_timeout)
            return True
        heard, memo.heard = memo.heard, None
        if heard is not None:
            await self._judge(group, memo, heard.unasked, heard.outlook, now=now, deadline=deadline)
        if left:
            return False
        if not memo.abandoned:
            try:
                memo.busy = await ghosts.clear(self.rows, group, spec)
            except (GiteaError, PermanentError) as exc:
                await self._judge(group, memo, str(exc), unanswered(exc), now=now, deadline=deadline)
                if not memo.abandoned:
                    raise
            else:
                await self._judge(group, memo, "", "", now=now, deadline=deadline)
                if memo.busy:
                    return False
        await self._let_go(group)
        return True

    async def _judge(
        self, group: GroupObject, memo: _Memo, error: str, outlook: str, *, now: float, deadline: float
    ) -> None:
        """Take in how one call to Gitea went (`error` "": it answered; `outlook`: `unanswered`'s word), and
        abandon the drain once Gitea cannot be asked any more."""
        if not error:
            memo.failing_since, memo.error = None, ""
            return
        memo.error = error
        if outlook == "unreachable" and memo.failing_since is None:
            memo.failing_since = now
        if memo.abandoned:
            return
        if outlook == "refused":
            await self._abandon(group, memo, f"Gitea cannot be asked about its runners ({error})", deadline)
        elif memo.failing_since is not None and now - memo.failing_since >= GONE_AFTER_S:
            why = f"Gitea has answered none of its calls for {now - memo.failing_since:.0f} s (last: {error})"
            await self._abandon(group, memo, why, deadline)

    async def _abandon(self, group: GroupObject, memo: _Memo, why: str, deadline: float) -> None:
        memo.abandoned = why
        until = datetime.fromtimestamp(deadline, UTC).isoformat(timespec="seconds")
        message = (
            f"Drain of {group.namespace}/{group.name} abandoned: {why}; see spec.authToken and spec.gitea.url. "
            f"Its runners not known busy are deleted without asking Gitea; busy ones get until {until} "
            "(GRS_DRAIN_TIMEOUT) to end their jobs. The rows of its runners stay in Gitea: one that took no "
            "job stays there until deleted."
        )
        log.warning("drain abandoned", extra={"group": group.name, "namespace": group.namespace, "error": why})
        await self.kube.event(group.ref, kind="Warning", reason="DrainAbandoned", message=message)

    async def _time_out(self, group: GroupObject, memo: _Memo, left: Sequence[str], drain_timeout: float) -> None:
        """Let the group go at its deadline, saying what is left."""
        parts = []
        if left:
            parts.append(f"runner Jobs {', '.join(left)} (garbage collection deletes them: a busy one loses its job)")
        if memo.busy:
            parts.append(f"the rows Gitea called busy of {', '.join(memo.busy)}")
        if memo.error:
            parts.append(f"whatever rows Gitea still lists of its runners (it was not asked: {memo.error})")
        what = "; ".join(parts) or "nothing known"
        if not memo.timed_out:
            message = (
                f"Drain of {group.namespace}/{group.name} not done {drain_timeout:g} s after its deletion "
                f"(GRS_DRAIN_TIMEOUT): its finalizer goes, leaving {what}."
            )
            log.warning("drain timed out", extra={"group": group.name, "namespace": group.namespace, "left": what})
            await self.kube.event(group.ref, kind="Warning", reason="DrainTimedOut", message=message)
            memo.timed_out = True
        await self._let_go(group)

    async def _let_go(self, group: GroupObject) -> None:
        await let_go(self.kube, group)
        self.memos.pop(group.uid, None)
        self.rows.forget(group.uid)
        now = time.monotonic()
        self.let_go_at = {uid: at for uid, at in self.let_go_at.items() if now - at < LET_GO_KEPT_S}
        self.let_go_at[group.uid] = now
