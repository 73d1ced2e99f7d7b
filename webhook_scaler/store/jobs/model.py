"""Pure: the job contract the receiver and the reconciler share, with no I/O library.

Owns: what one observed job state is (`JobUpdate`) and the rank rule that orders them, what the
reconciler reads back (`QueuedJob`), which jobs a reader wants (`Scope`), and the facts recorded for
the metrics (`Observation`).

Ordering. A job id is reused by reruns, and deliveries come late, twice, or out of order. Each event
gets a rank `generation * 8 + phase`: the generation is the attempt a runner picked (`in_progress`,
or `completed` after a pickup) or the next one (`waiting`, `queued`, `completed` without a pickup,
because `run_attempt` grows only at pickup); the phase orders waiting < queued < in_progress <
completed. A change applies only if its rank is higher than the stored one, so any order and any
duplication of a job's events ends in the state of the last event in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from webhook_scaler.gitea import JobStatus, WorkflowJob, WorkflowJobPayload

_PHASE = {JobStatus.WAITING: 1, JobStatus.QUEUED: 2, JobStatus.IN_PROGRESS: 3, JobStatus.COMPLETED: 4}


def rank(status: JobStatus, *, run_attempt: int, picked: bool) -> int:
    """The order of one observed state among all states of one job id (see the module doc)."""
    generation = run_attempt if picked else run_attempt + 1
    return generation * 8 + _PHASE[status]


@dataclass(frozen=True, slots=True)
class JobUpdate:
    """One observed state of a job, from a webhook or a poll."""

    job_id: int
    state: JobStatus
    rank: int
    attempt: int
    labels: tuple[str, ...]
    owner: str
    repo: str  # owner/name, lower-case
    name: str
    run_id: int
    runner_name: str | None = None
    conclusion: str | None = None
    aged: bool = False  # a webhook's `queued` about a job created before the replay window: see QueuedJob

    @classmethod
    def from_job(cls, job: WorkflowJob, *, repo_full_name: str) -> JobUpdate:
        """The update a job in a webhook or an API listing describes."""
        picked = job.status is JobStatus.IN_PROGRESS or (job.status is JobStatus.COMPLETED and job.was_picked)
        repo = repo_full_name.lower()
        return cls(
            job_id=job.id,
            state=job.status,
            rank=rank(job.status, run_attempt=job.run_attempt, picked=picked),
            attempt=job.run_attempt,
            labels=job.labels,
            owner=repo.split("/", 1)[0],
            repo=repo,
            name=job.name,
            run_id=job.run_id,
            runner_name=job.runner_name,
            conclusion=job.conclusion,
        )

    @classmethod
    def from_payload(cls, payload: WorkflowJobPayload) -> JobUpdate:
        """The update a `workflow_job` webhook describes."""
        return cls.from_job(payload.workflow_job, repo_full_name=payload.repository.full_name)


@dataclass(frozen=True, slots=True)
class Scope:
    """Which queued jobs a reader wants: all of them, one owner's, or one repository's."""

    kind: Literal["all", "owner", "repo"]
    name: str = ""


ALL = Scope("all")


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job waiting for a runner, as the reconciler sees it."""

    job_id: int
    labels: tuple[str, ...]
    owner: str
    repo: str
    name: str
    run_id: int
    attempt: int  # Gitea's run_attempt: the attempt a runner picks is attempt + 1
    queued_ms: int
    claimed_by: str | None
    # when the latest poll that listed it queued began (Redis ms); None if no poll listed it
    listed_ms: int | None = None
    missed: bool = False  # the latest complete listing of its scope did not show it: most likely gone
    # recorded from a webhook about a job Gitea created before the receiver's replay window: as likely a
    # replay as a re-run, so it waits for a poll to list it (`listed_ms`) wherever the poll works
    aged: bool = False

    @property
    def unconfirmed(self) -> bool:
        """Aged, and no poll listed it queued since it was recorded (a record clears `listed_ms`)."""
        return self.aged and self.listed_ms is None

    @property
    def generation(self) -> int:
        """The attempt a runner started for this job would run (`run_attempt` grows at pickup)."""
        return self.attempt + 1


@dataclass(frozen=True, slots=True)
class Observation:
    """A fact for the metrics, recorded with the change that made it: a runner took a job (`picked`,
    `seconds` it waited queued) or its job completed (`seconds` it ran, -1 if its start was not seen)."""

    runner: str
    kind: Literal["picked", "completed"]
    seconds: float
    conclusion: str = ""
