"""Pure: which group serves each queued job.

Every queued job goes to exactly one group, so that two groups never both start a runner for it.
Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reconciler.spec import RunnerGroupSpec
from webhook_scaler.jobs import QueuedJob

_SPECIFICITY = {"repo": 3, "org": 2, "user": 2, "global": 1}


@dataclass(frozen=True, slots=True)
class GroupView:
    """A RunnerGroup as the assignment sees it."""

    namespace: str
    name: str
    spec: RunnerGroupSpec
    label_names: frozenset[str]


def covers(spec: RunnerGroupSpec, job: QueuedJob) -> bool:
    """Whether a group's scope includes the job's repository (names compare case-insensitively)."""
    if spec.scope == "global":
        return True
    if spec.scope == "repo":
        return job.repo == (spec.repo or "").lower()
    return job.owner == ((spec.org if spec.scope == "org" else spec.user) or "").lower()


def assign(queued: Sequence[QueuedJob], groups: Sequence[GroupView]) -> dict[tuple[str, str], list[QueuedJob]]:
    """Give every queued job to exactly one group: of those whose scope and labels match and that are
    not suspended, the most specific scope (repo, then org or user, then global), then the first by
    namespace and name. A job no group matches is in no list.
    """
    ranked = sorted(
        (g for g in groups if not g.spec.suspend), key=lambda g: (-_SPECIFICITY[g.spec.scope], g.namespace, g.name)
    )
    # Index the groups by what their scope names, so each job looks only at the groups that can cover it:
    # a pass stays linear in jobs + groups, however many repository-scoped groups there are.
    by_repo: dict[str, list[GroupView]] = {}
    by_owner: dict[str, list[GroupView]] = {}
    everywhere: list[GroupView] = []
    for g in ranked:
        if g.spec.scope == "repo":
            by_repo.setdefault((g.spec.repo or "").lower(), []).append(g)
        elif g.spec.scope == "global":
            everywhere.append(g)
        else:
            by_owner.setdefault(((g.spec.org if g.spec.scope == "org" else g.spec.user) or "").lower(), []).append(g)
    out: dict[tuple[str, str], list[QueuedJob]] = {(g.namespace, g.name): [] for g in groups}
    for job in queued:
        for g in (*by_repo.get(job.repo, ()), *by_owner.get(job.owner, ()), *everywhere):
            if covers(g.spec, job) and all(lb in g.label_names for lb in job.labels):
                out[(g.namespace, g.name)].append(job)
                break
    return out
