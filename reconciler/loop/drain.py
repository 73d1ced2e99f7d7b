"""A deleted RunnerGroup's way out: its finalizer holds the group until its runners are done.

Owns the finalizer `gitea.bpg.pw/runners`: added to every group the controller serves, removed once a
deleted group has no runner Job left running and Gitea lists no row of its runners. While the group
is being deleted its passes start no runner and delete every runner that took no job, each through
Gitea first (`gitea_runners`); busy runners run their jobs to the end. If the group's API token can
no longer be read (its Secret went with it), Gitea cannot be asked anything: the finalizer goes at
once, and a Warning Event says that the runners are left to garbage collection and their rows to
Gitea. Deciding what to delete is `plan`'s (`draining`); this module only holds and lets go.
"""

from __future__ import annotations

import logging

from reconciler.kube.api import Kube, PermanentError
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop import gitea_ghosts
from reconciler.loop.gitea_runners import RunnerRows
from reconciler.model.spec import RunnerGroupSpec

log = logging.getLogger(__name__)
FINALIZER = "gitea.bpg.pw/runners"


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


async def finish(
    kube: Kube, rows: RunnerRows, group: GroupObject, spec: RunnerGroupSpec, jobs: list[JobObject]
) -> bool:
    """Once no runner Job of a deleted group runs: delete its runners' rows left in Gitea, then let the
    group go. False while a runner runs, or a row Gitea calls busy is left."""
    if not group.deleting or any(not j.finished for j in jobs):
        return False
    try:
        busy = await gitea_ghosts.clear(rows, group, spec)
    except PermanentError as exc:
        message = (
            f"Drain abandoned: {exc}. Gitea cannot be asked whether runners are idle: they are left to"
            " garbage collection (a busy one loses its job) and their rows to Gitea."
        )
        await kube.event(group.ref, kind="Warning", reason="DrainAbandoned", message=message)
        await let_go(kube, group)
        return True
    if busy:
        return False
    await let_go(kube, group)
    return True
