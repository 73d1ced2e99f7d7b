"""Where our runners' rows are in Gitea, and when a listing proves one missing.

Owns: looking for runners' rows by name in a group's scope, then in the wider scopes its API token can
list (`scopes.wider`: a runner registered with an org token while its group serves one repository
is an org runner), and which names the listings prove missing. Gitea lists runners `last_online DESC`
in pages of at most 50 (`gitea.paging`): rows move between pages as runners poll, register and go.
- One short page is one SELECT: a name missing from it is missing from Gitea.
- Several pages can miss a row without their count showing it (a row removed before the page being
  read while another is added after it), so a name missing from a complete listing of several pages is
  looked for in a second complete listing, read after the first: missing from both, it is missing.
- A listing that is not complete (rows moved while it was read) proves nothing missing.
Must not change anything in Gitea (`vetting` does), nor touch Redis or Kubernetes.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reconciler.gitea.api import GiteaClient, GiteaError, PollScope
from reconciler.gitea.paging import PAGE_SIZE
from reconciler.loop.scopes import wider
from webhook_scaler.gitea import ActionRunner

Rows = dict[str, tuple[PollScope, ActionRunner]]  # runner name -> the scope listing it, and its row


@dataclass(frozen=True, slots=True)
class Found:
    """Where the runners' rows are: by name, the scope listing each and its row; and which names the
    group's own scope (`missing_here`) or every scope its token can list (`absent`) proves missing."""

    rows: Rows
    missing_here: set[str]
    absent: set[str]


async def find(gitea: GiteaClient, scope: PollScope, names: set[str]) -> Found:
    """Look for the rows of `names` in the group's scope, then in the wider ones for those missing;
    GiteaError if the group's own scope cannot be listed."""
    rows: Rows = {}
    missing_here: set[str] = set()
    proven = True
    for s in [scope, *wider(scope)]:
        wanted = names - rows.keys()
        if not wanted:
            break
        try:
            complete = await _look(gitea, s, wanted, rows)
        except GiteaError:
            if s is scope:
                raise
            proven = False  # the token has no say there (403), or it did not answer
            continue
        if s is scope and complete:
            missing_here = names - rows.keys()
        proven = proven and complete
    return Found(rows, missing_here, (names - rows.keys()) if proven else set())


async def _look(gitea: GiteaClient, scope: PollScope, wanted: set[str], rows: Rows) -> bool:
    """Add the rows of `wanted` that `scope` lists to `rows`; whether the names not found are missing
    there (see the module doc)."""
    listed = await gitea.runners(scope)
    rows.update((name, (scope, row)) for name, row in by_name(listed.runners, wanted).items())
    if not listed.complete or len(listed.runners) < PAGE_SIZE or not wanted - rows.keys():
        return listed.complete
    again = await gitea.runners(scope)  # several pages: the names missing must be missing again
    rows.update((name, (scope, row)) for name, row in by_name(again.runners, wanted - rows.keys()).items())
    return again.complete


def by_name(runners: Iterable[ActionRunner], wanted: set[str]) -> dict[str, ActionRunner]:
    """The row of each wanted name. A name given again (after the Job and Pods of its earlier runner went)
    may have a row the earlier runner left behind: the live one is the busy one, else one that is not
    offline (a runner polls Gitea every few seconds; a row left behind is offline)."""
    out: dict[str, ActionRunner] = {}
    for row in runners:
        if row.name in wanted:
            first = out.get(row.name)
            if first is None or (row.busy, row.status != "offline") > (first.busy, first.status != "offline"):
                out[row.name] = row
    return out
