"""Pure: which group serves each queued job.

Every queued job goes to exactly one group, so that two groups never both start a runner for it.
Only groups whose API token proved their scope take jobs, and a group whose registrations Gitea
refused lately only those no other group takes (`ownership`, `Standing`). Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reconciler.model.labels import effective_labels, names
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.store.jobs.model import QueuedJob

_SPECIFICITY = {"repo": 3, "org": 2, "user": 2, "global": 1}


@dataclass(frozen=True, slots=True)
class GroupView:
    """A RunnerGroup as the assignment sees it."""

    namespace: str
    name: str
    spec: RunnerGroupSpec
    label_names: frozenset[str]
    proven: bool = True  # its API token proved it administers its scope (`ownership`): else it takes no job
    demoted: bool = False  # Gitea refused its registrations lately: it takes only jobs no other group takes


@dataclass(frozen=True, slots=True)
class Standing:
    """Which groups take no job (`unproven`), and which only jobs no other group takes (`demoted`)."""

    unproven: frozenset[tuple[str, str]] = frozenset()
    demoted: frozenset[tuple[str, str]] = frozenset()


EVERY_PROVEN = Standing()  # every group takes jobs (what a caller that knows of no proof passes)


def covers(spec: RunnerGroupSpec, job: QueuedJob) -> bool:
    """Whether a group's scope includes the job's repository (names compare case-insensitively)."""
    if spec.scope == "global":
        return True
    if spec.scope == "repo":
        return job.repo == (spec.repo or "").lower()
    return job.owner == ((spec.org if spec.scope == "org" else spec.user) or "").lower()


@dataclass(frozen=True, slots=True)
class GroupIndex:
    """The groups indexed by what their scope names, most specific first: built once per change of the
    groups, so each job looks only at the groups that can cover it and a round stays linear in jobs +
    groups, however many repository-scoped groups there are."""

    groups: tuple[GroupView, ...]
    by_repo: dict[str, list[GroupView]]
    by_owner: dict[str, list[GroupView]]
    everywhere: list[GroupView]


def index_groups(groups: Sequence[GroupView]) -> GroupIndex:
    """The index `assign` reads (see `GroupIndex`)."""
    ranked = sorted(
        (g for g in groups if g.proven and not g.spec.suspend),
        key=lambda g: (-_SPECIFICITY[g.spec.scope], g.namespace, g.name),
    )
    index = GroupIndex(tuple(groups), {}, {}, [])
    for g in ranked:
        if g.spec.scope == "repo":
            index.by_repo.setdefault((g.spec.repo or "").lower(), []).append(g)
        elif g.spec.scope == "global":
            index.everywhere.append(g)
        else:
            owner = (g.spec.org if g.spec.scope == "org" else g.spec.user) or ""
            index.by_owner.setdefault(owner.lower(), []).append(g)
    return index


def assign(
    queued: Sequence[QueuedJob], groups: Sequence[GroupView] | GroupIndex
) -> dict[tuple[str, str], list[QueuedJob]]:
    """Give every queued job to exactly one group: of those whose scope and labels match, that are not
    suspended and whose scope is proven, the most specific scope (repo, then org or user, then global),
    then the first by namespace and name; a demoted group only if no other matches. A job no group
    matches is in no list.
    """
    index = groups if isinstance(groups, GroupIndex) else index_groups(groups)
    out: dict[tuple[str, str], list[QueuedJob]] = {(g.namespace, g.name): [] for g in index.groups}
    for job in queued:
        key = group_of(job, index)
        if key is not None:
            out[key].append(job)
    return out


def group_of(job: QueuedJob, index: GroupIndex) -> tuple[str, str] | None:
    """The group `assign` gives one job to, or None. It reads only what a job id never changes (its
    repository and labels), so it may be remembered for as long as `index` is current."""
    fallback: tuple[str, str] | None = None
    for g in (*index.by_repo.get(job.repo, ()), *index.by_owner.get(job.owner, ()), *index.everywhere):
        if covers(g.spec, job) and all(lb in g.label_names for lb in job.labels):
            if not g.demoted:
                return (g.namespace, g.name)
            fallback = fallback or (g.namespace, g.name)
    return fallback


class CachedIndex:
    """The index of the valid groups, rebuilt only when a spec changed, a group came or went (a spec
    object is kept while its group's generation is: see `Controller.views`) or the standing changed."""

    def __init__(self) -> None:
        self._built: tuple[tuple[RunnerGroupSpec, ...], Standing, GroupIndex] | None = None

    def of(self, groups: Sequence[tuple[str, str, RunnerGroupSpec]], standing: Standing = EVERY_PROVEN) -> GroupIndex:
        """The index of `groups` (namespace, name, validated spec), as they stand (`Standing`)."""
        specs = tuple(spec for _, _, spec in groups)
        built = self._built
        if (
            built is None
            or built[1] != standing
            or len(built[0]) != len(specs)
            or any(a is not b for a, b in zip(built[0], specs, strict=True))
        ):
            views = [
                GroupView(
                    ns,
                    name,
                    spec,
                    names(effective_labels(spec.labels, spec.default_labels)),
                    proven=(ns, name) not in standing.unproven,
                    demoted=(ns, name) in standing.demoted,
                )
                for ns, name, spec in groups
            ]
            built = self._built = (specs, standing, index_groups(views))
        return built[2]
