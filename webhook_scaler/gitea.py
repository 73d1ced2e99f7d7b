"""Pydantic models of the Gitea fields this project reads, from webhooks and from the REST API.

Owns: the shape of `workflow_job` payloads and `/actions/jobs` list responses, tolerant of the
differences between Gitea 1.24, 1.25 and 1.26 (see shared/gitea/PROTOCOL.md): a skipped job without
`conclusion` (1.24), `steps` null until a runner picks the job, `runner_name` absent once an ephemeral
runner is gone, `1970-01-01T00:00:00Z` for times that have not happened, and a missing `head_branch`
or `organization`. Unknown fields are ignored. Must not do I/O.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# `{root}api/v1/repos/{owner}/{repo}/actions/jobs/{id}` (1.25+) or `.../actions/runs/{run}/jobs/{id}` (1.24).
_REPO_IN_URL = re.compile(r"/api/v1/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/actions/")


class JobStatus(StrEnum):
    """The `status` (= webhook `action`) of a workflow job as Gitea renders it."""

    WAITING = "waiting"  # blocked on `needs:`, approval or concurrency: not demand
    QUEUED = "queued"  # ready for a runner: demand
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"


def _none_to_empty(value: object) -> object:
    return [] if value is None else value


def _unset_time(value: object) -> object:
    # Gitea renders a zero unix timestamp as 1970-01-01T00:00:00Z: that means "not yet".
    if value in (None, "", "1970-01-01T00:00:00Z", "0001-01-01T00:00:00Z"):
        return None
    return value


Labels = Annotated[tuple[str, ...], BeforeValidator(_none_to_empty)]
OptionalTime = Annotated[datetime | None, BeforeValidator(_unset_time)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Owner(_Model):
    """A repository owner, a user or an organization."""

    id: int
    login: str


class Repository(_Model):
    """The repository a job belongs to."""

    id: int
    name: str
    full_name: str
    owner: Owner


class Step(_Model):
    """One step of a job; Gitea repeats the job's status in every step."""

    name: str
    number: int


class WorkflowJob(_Model):
    """A workflow job, as in the webhook's `workflow_job` and in `/actions/jobs` responses."""

    id: int = Field(gt=0)
    url: str = ""
    run_id: int
    name: str = ""
    labels: Labels = ()
    run_attempt: int = Field(default=0, ge=0)
    status: JobStatus
    conclusion: str | None = None
    runner_id: int | None = None
    runner_name: str | None = None
    steps: Annotated[tuple[Step, ...], BeforeValidator(_none_to_empty)] = ()
    head_branch: str | None = None
    created_at: OptionalTime = None
    started_at: OptionalTime = None
    completed_at: OptionalTime = None

    @property
    def repo_full_name(self) -> str | None:
        """`owner/name` of the job's repository, from its API `url` (1.24 and 1.25 shapes alike)."""
        match = _REPO_IN_URL.search(self.url)
        return f"{match['owner']}/{match['repo']}" if match else None

    @property
    def was_picked(self) -> bool:
        """Whether a runner took this attempt of the job (runner fields or a start time are set)."""
        return bool(self.runner_id) or self.started_at is not None


class WorkflowJobPayload(_Model):
    """The body of a `workflow_job` webhook delivery."""

    action: JobStatus
    workflow_job: WorkflowJob
    repository: Repository


class WorkflowJobsResponse(_Model):
    """The body of `GET .../actions/jobs`."""

    jobs: Annotated[tuple[WorkflowJob, ...], BeforeValidator(_none_to_empty)] = ()
    total_count: int = 0


class RepositoryRef(_Model):
    """A repository as listed by `GET /users/{user}/repos`."""

    name: str
    full_name: str
    owner: Owner


class ActionRunner(_Model):
    """A runner as `GET .../actions/runners` lists it (1.24+). `status` is `online` or `offline` (no
    contact for a minute); `busy` means it reported on a task in the last 10 s."""

    id: int
    name: str
    status: str = ""
    busy: bool = False
    ephemeral: bool = False


class ActionRunnersResponse(_Model):
    """The body of `GET .../actions/runners`."""

    runners: Annotated[tuple[ActionRunner, ...], BeforeValidator(_none_to_empty)] = ()
    total_count: int = 0
