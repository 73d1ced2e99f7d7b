"""Pure: what each runner Job of a group is doing, classified from its Job, its Pods and Gitea's word.

Owns: `Phase`, `Runner` (one runner Job as `plan` decides from it) and `classify`, which also tells a
runner that failed apart from one Kubernetes stopped (`Runner.disruption`). Classified before anything
is decided, so `plan` never reads a Job or a Pod. Must not do I/O or read the clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum


class Phase(StrEnum):
    """What a runner Job is doing, classified from the Job and its Pod."""

    PENDING = "pending"  # no Pod yet, or the Pod is not running (scheduling, pulling the image)
    IDLE = "idle"  # running, not known to have taken a job
    BUSY = "busy"  # running a Gitea job
    # still running although the one job it took is over: act_runner exits within a second after a
    # job, unless Gitea removed it mid-job (a cancelled run deletes the ephemeral runner's row, and
    # the runner never hears of the cancel); after a grace it is deleted, as it serves nobody
    FINISHING = "finishing"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


ACTIVE = frozenset({Phase.PENDING, Phase.IDLE, Phase.BUSY, Phase.FINISHING})
# A failed runner Job none of whose Pods is left: Kubernetes deleted its Pod (an eviction, a preemption,
# its node's loss, a delete by hand, its Job's deadline). A runner that fails on its own keeps its Pod,
# Failed, for as long as its Job is there.
POD_GONE = "PodDeleted"


@dataclass(frozen=True, slots=True)
class Runner:
    """One runner Job of the group."""

    name: str
    phase: Phase
    since_ms: int  # when it entered its phase (creation for PENDING, pod start for IDLE)
    job_id: int | None = None  # the Gitea job it was started for (None: a warm runner)
    reason: str = ""  # why it failed, for FAILED
    finished_ms: int = 0  # when it finished, for SUCCEEDED and FAILED
    outdated: bool = False  # made from a spec the group no longer has
    # Gitea told us it took a job (a webhook or a poll), since its Job was created; for FAILED: a job
    # not over when it failed (it died during the job)
    heard: bool = False
    # for FAILED: why Kubernetes stopped it ("" if it failed on its own): an ordinary event of a cluster
    # (a drain, a preemption, a node lost), never a reason to hold the group back (see `plan.backoff`)
    disruption: str = ""


def classify(
    name: str,
    *,
    job_id: int | None,
    created_ms: int,
    finished: str,
    reason: str,
    pod_phases: Sequence[tuple[str, int | None]],
    busy: bool,
    finished_ms: int = 0,
    done_ms: int | None = None,
    disruption: str = "",
) -> Runner:
    """A runner's phase from its Job's finish condition, its Pods' (phase, running-since) and Gitea's word
    (`busy`: it runs a job; `done_ms`: when the job it took completed); `disruption`: why Kubernetes
    stopped one of its Pods, if it did (`objects.PodObject.disruption`)."""
    heard = busy or done_ms is not None
    if finished == "Complete":
        return Runner(name, Phase.SUCCEEDED, created_ms, job_id, finished_ms=finished_ms or created_ms, heard=heard)
    if finished == "Failed":
        failed_ms = finished_ms or created_ms
        stopped = disruption or ("" if pod_phases else POD_GONE)
        lost = busy and done_ms is None
        return Runner(
            name, Phase.FAILED, created_ms, job_id, reason or "Failed", failed_ms, heard=lost, disruption=stopped
        )
    running = [since for phase, since in pod_phases if phase == "Running"]
    if busy:
        return Runner(name, Phase.BUSY, min((s for s in running if s), default=created_ms), job_id)
    if running and done_ms is not None:
        return Runner(name, Phase.FINISHING, done_ms, job_id)
    if running:
        return Runner(name, Phase.IDLE, min((s for s in running if s), default=created_ms), job_id)
    if any(phase == "Succeeded" for phase, _ in pod_phases):
        # The runner exited 0 after its one job; the Job's Complete condition follows shortly.
        return Runner(name, Phase.SUCCEEDED, created_ms, job_id, heard=heard)
    return Runner(name, Phase.PENDING, created_ms, job_id)
