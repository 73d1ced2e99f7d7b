"""The runner rows our runners leave behind in Gitea: swept while the groups run, cleared when one goes.

A row is left behind when its runner went without Gitea removing it: deleted or evicted behind our
back, killed before its job, its group's drain abandoned. Rows are looked for in each group's scope
and in the wider scopes its API token can list (`scopes.wider`): a runner registered with an org
token while its group serves one repository is an org runner. A wider scope the token may not list is
skipped quietly; the group's own is reported.

The sweep lists each (Gitea, scope, token) once per interval and deletes rows that are offline, named
like a runner of a group whose scope it lists, and whose runner Job is finished, or gone and holds no seat
(a Job being created holds one before the cache can show it), or is another runner of the same Job
name; and only rows that were ghosts at the sweep before too. A runner takes its seat before it
registers and keeps it until its Job is over or was never made, so its row is listed only while its
seat is held; but the seats and Jobs a sweep is given were read before it lists, and a runner can
register in between. The next sweep's reads come after this sweep's listing, so a row both sweeps call
a ghost was judged from reads made after its runner registered.
Must not touch Redis; Kubernetes only through the cache and `Kube.secret_value`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from reconciler.gitea.api import GiteaError, PollScope
from reconciler.kube.objects import GroupObject, JobObject
from reconciler.loop.retiring.vetting import RunnerRows
from reconciler.loop.scopes import owners_of_runner, wider
from reconciler.model.names import job_of_runner
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.gitea import ActionRunner

log = logging.getLogger(__name__)


async def clear(rows: RunnerRows, group: GroupObject, spec: RunnerGroupSpec) -> list[str]:
    """Delete the rows Gitea lists of a group's runners (a group being deleted, none of whose runner Jobs
    runs any more) unless busy; the names of the busy ones left. PermanentError if the group's API token
    cannot be read (see `tokens`); GiteaError if its own scope cannot be listed, or not completely
    (a row of ours may have moved past the pages read)."""
    scope = await rows.tokens.scope(group, spec)
    label = f"{group.namespace}/{group.name}"
    own = await rows.gitea.runners(scope)
    if not own.complete:
        raise GiteaError("runners listing incomplete: rows moved while it was read")
    listings = [(scope, own.runners), *[(s, await _listed(rows, s, own=False)) for s in wider(scope)]]
    busy: dict[int, str] = {}  # by id: the instance's listing shows every row the narrower ones did
    for where, listed in listings:
        for row in (r for r in listed if owners_of_runner(r.name, [group])):
            if row.busy:
                busy[row.id] = row.name
            else:
                await rows.delete_row(where, row, label, reason="drain")
    return sorted(busy.values())


async def sweep(
    rows: RunnerRows,
    scopes: Mapping[PollScope, Sequence[GroupObject]],
    jobs: Mapping[tuple[str, str], JobObject],
    seated: Mapping[str, set[str]],
) -> int:
    """Delete the ghost rows of every scope and the wider ones (one listing each); how many were deleted.

    `scopes`: the groups by their (Gitea, scope, token); `jobs`: the runner Jobs by (namespace, name);
    `seated`: by group uid, the runner Jobs holding a seat (by any replica), which includes those being
    created that the cache does not show yet. A ghost is deleted at the second sweep in a row that
    finds it one (see the module doc)."""
    removed = 0
    for scope, (groups, own) in _widened(scopes).items():
        where, ghosts = (scope.url, scope.kind, scope.target), set[int]()
        for row in await _listed(rows, scope, own=own):
            if row.status != "offline" or row.busy:
                continue
            mine = owners_of_runner(row.name, groups)
            if not mine or any(_in_use(row.name, g, jobs, seated) for g in mine):
                continue
            # A ghost at the sweep before too (see the module doc). Runners named before the group key
            # (`names.group_key`) may match groups of one name in several namespaces: the first one counts it.
            label = f"{mine[0].namespace}/{mine[0].name}"
            if row.id in rows.suspects.get(where, ()) and await rows.delete_row(scope, row, label, reason="ghost"):
                removed += 1
            else:
                ghosts.add(row.id)
        rows.suspects[where] = ghosts
    return removed


def _widened(
    scopes: Mapping[PollScope, Sequence[GroupObject]],
) -> dict[PollScope, tuple[list[GroupObject], bool]]:
    """Every scope to list: the groups' own, then the wider ones, each with the groups whose rows it may
    hold and whether it is some group's own."""
    out: dict[PollScope, tuple[list[GroupObject], bool]] = {s: (list(g), True) for s, g in scopes.items()}
    for scope, groups in scopes.items():
        for where in wider(scope):
            held, _ = out.setdefault(where, ([], False))
            held.extend(g for g in groups if g not in held)
    return out


async def _listed(rows: RunnerRows, scope: PollScope, *, own: bool) -> list[ActionRunner]:
    """The rows of one scope, or none if it cannot be listed: a group's own is reported (the next sweep
    tries again), a wider one only at DEBUG (the token may not list it)."""
    try:
        return list((await rows.gitea.runners(scope)).runners)
    except GiteaError as exc:
        extra = {"scope": repr(scope), "error": str(exc)}
        (log.warning if own else log.debug)("runner rows not listed", extra=extra)
        return []


def _in_use(
    runner: str, group: GroupObject, jobs: Mapping[tuple[str, str], JobObject], seated: Mapping[str, set[str]]
) -> bool:
    """Whether the row `runner` may be of a runner of `group` that has not ended: its Job runs, or a Job of
    its name is being created (seated, not in the cache yet). A Job of that name that is another runner
    (a later one: names of Jobs come back, runners' names do not) leaves this row a ghost."""
    name = job_of_runner(runner)
    job = jobs.get((group.namespace, name))
    if job is None:
        return name in seated.get(group.uid, ())
    return not job.finished and job.runner == runner
