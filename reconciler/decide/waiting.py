"""Pure: why a group's queued jobs still wait, counted by reason: what answers "why is my job waiting?".

A pass counts its group's queued jobs (those no runner took yet) as waiting for a runner that is
starting for them, as many as the group has starting (Pods pending, or up and not yet picked by a
job; created this pass, or by another replica a moment ago). Any others wait for one reason, the first
that holds: the group is being deleted, is suspended, had its last runner refused (by the API server
or by Gitea's registration: the `RunnersAdmitted` condition says why), is backing off after failed
runners (`RunnersHealthy`), or runs `maxActiveRunners` runners; else a finished runner may have run
one of them unheard, or the job is aged (`believed`), which the next poll of Gitea tells
(`unconfirmed`). Where the queue is read, two more are counted that no group has: queued jobs that
no group's scope and labels match (`NO_GROUP`), and jobs Gitea holds `waiting`, on `needs:` or an
approval (`HELD_IN_GITEA`, from its webhooks). Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.decide.phases import Phase, Runner
from reconciler.decide.plan import Plan
from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.store.jobs.model import QueuedJob

# Every reason a group's queued job waits for, as the status's `waitingJobs` and the gauge's `reason` name it.
REASONS = ("runnerStarting", "deleting", "suspended", "refused", "backoff", "maxActiveRunners", "unconfirmed")
NO_GROUP = "noMatchingGroup"  # the queue's jobs that no group's scope and labels match (no group has them)
HELD_IN_GITEA = "waitingInGitea"  # jobs Gitea holds `waiting` (on `needs:`, an approval): not queued yet


def believed(queued: Sequence[QueuedJob], *, polled: bool) -> list[QueuedJob]:
    """The queued jobs that may get a runner now. An aged one (from a webhook about a job Gitea created
    before the receiver's replay window: as likely a replay as a re-run) waits, counted `unconfirmed`,
    until a poll lists it queued, where the group's poll works (`polled`); where it is off or failing
    nothing else can tell, and the job is believed."""
    return [q for q in queued if not (polled and q.unconfirmed)]


def waiting(
    spec: RunnerGroupSpec,
    decided: Plan,
    runners: Sequence[Runner],
    *,
    created: int,
    in_flight: int,
    refused: bool,
    draining: bool,
) -> dict[str, int]:
    """Every reason in REASONS with how many of the group's queued jobs wait for it after this pass:
    `created` runners this pass made, `in_flight` runners made elsewhere not yet seen, whether the
    pass's creates were `refused`, whether the group is `draining` (being deleted)."""
    deleted = {d.name for d in decided.delete}
    starting = sum(r.phase in (Phase.PENDING, Phase.IDLE) and r.name not in deleted for r in runners)
    queued = max(0, decided.counts.queued)
    counts = dict.fromkeys(REASONS, 0)
    counts["runnerStarting"] = min(queued, starting + created + in_flight)
    rest = queued - counts["runnerStarting"]
    if rest:
        counts[_why(spec, decided, refused=refused, draining=draining)] = rest
    return counts


def _why(spec: RunnerGroupSpec, decided: Plan, *, refused: bool, draining: bool) -> str:
    if draining:
        return "deleting"
    if spec.suspend:
        return "suspended"
    if refused:
        return "refused"
    if decided.held:
        return "backoff"
    if decided.counts.active >= spec.max_active_runners:
        return "maxActiveRunners"
    return "unconfirmed"
