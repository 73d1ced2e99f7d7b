"""Pydantic models of the Gitea fields this project reads, from webhooks and from the REST API.

Owns: the shape of `workflow_job` payloads and `/actions/jobs` list responses, tolerant of the
differences between Gitea 1.24, 1.25 and 1.26 (see shared/gitea/PROTOCOL.md): a skipped job without
`conclusion` (1.24), `steps` null until a runner picks the job, `runner_name` absent once an ephemeral
runner is gone, `1970-01-01T00:00:00Z` for times that have not happened, and a missing `head_branch`
or `organization`. Unknown fields are ignored. Must not do I/O.

Fields are held to Gitea's own types and ranges (swagger.v1.json, `models/actions`, `models/repo`): ids
are positive int64, `run_attempt` and counts non-negative int64, numbers and booleans must be JSON
numbers and booleans (Go never renders them as strings), strings are bounded by their database columns
(VARCHAR(255) for job, runner and branch names), `runs-on` labels are non-empty strings, and a
repository's `full_name` is `owner/name` in Gitea's name alphabet. Anything else is refused, naming
the field: it did not come from Gitea.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated
from urllib.parse import urlsplit

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool

# `{root}api/v1/repos/{owner}/{repo}/actions/jobs/{id}` (1.25+) or `.../actions/runs/{run}/jobs/{id}` (1.24).
_REPO_IN_URL = re.compile(r"/api/v1/repos/(?P<owner>[^/]+)/(?P<repo>[^/]+)/actions/")


_PORTS = {"http": 80, "https": 443}


def instance_url(url: str) -> str:
    """The Gitea instance a URL names: `scheme://host:port/path`, lower-case host, default ports spelt
    out, no trailing slash (two spellings of one URL are one instance; two hosts of one Gitea, two)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or _PORTS.get(scheme, 0)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}{parts.path.rstrip('/')}"


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


INT64_MAX = 2**63 - 1
# Gitea's `runs-on` and runner labels are JSON TEXT columns with no per-label or per-list limit
# (`ActionRunJob.RunsOn`, `ActionRunner.AgentLabels`), so these bounds are ours: a label longer than the
# VARCHAR(255) Gitea gives every other name, or a job needing more than 64 labels at once, is no job a
# runner group here can be written for (act_runner's defaults are 3; real `runs-on` lists have a few).
LABEL_MAX_CHARS = 255
LABELS_MAX = 64
NAME_MAX_CHARS = 255  # VARCHAR(255): ActionRunJob.Name, ActionRunner.Name, ActionRun.Ref
# User and repository names: `[-.\w]` (Go's ASCII \w), `validation.IsValidUsername` / AlphaDashDot.
# The forms cap them at 40 and 100, but LDAP sync and repository adoption skip the forms; the columns
# are VARCHAR(255).
_NAME_PART = r"[A-Za-z0-9_.-]{1,255}"
FULL_NAME_PATTERN = rf"^{_NAME_PART}/{_NAME_PART}$"

Id = Annotated[int, Field(strict=True, ge=1, le=INT64_MAX)]
Count = Annotated[int, Field(strict=True, ge=0, le=INT64_MAX)]
Name = Annotated[str, Field(strict=True, max_length=NAME_MAX_CHARS)]
Text = Annotated[str, Field(strict=True)]
Label = Annotated[str, Field(strict=True, min_length=1, max_length=LABEL_MAX_CHARS)]
Labels = Annotated[tuple[Label, ...], BeforeValidator(_none_to_empty), Field(max_length=LABELS_MAX)]
NamePart = Annotated[str, Field(strict=True, pattern=rf"^{_NAME_PART}$")]
FullName = Annotated[str, Field(strict=True, pattern=FULL_NAME_PATTERN)]
OptionalTime = Annotated[datetime | None, BeforeValidator(_unset_time)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Owner(_Model):
    """A repository owner, a user or an organization."""

    id: Id
    login: NamePart


class Repository(_Model):
    """The repository a job belongs to."""

    id: Id
    name: NamePart
    full_name: FullName
    owner: Owner


class Step(_Model):
    """One step of a job; Gitea repeats the job's status in every step."""

    name: Text
    number: Count


class WorkflowJob(_Model):
    """A workflow job, as in the webhook's `workflow_job` and in `/actions/jobs` responses."""

    id: Id
    url: Text = ""
    run_id: Id
    name: Name = ""
    labels: Labels = ()
    run_attempt: Count = 0
    status: JobStatus
    conclusion: Name | None = None
    runner_id: Count | None = None  # omitempty: absent, not 0, when no runner took the job
    runner_name: Name | None = None
    steps: Annotated[tuple[Step, ...], BeforeValidator(_none_to_empty)] = ()
    head_branch: Name | None = None
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
    total_count: Count = 0


class RepositoryRef(_Model):
    """A repository as listed by `GET /users/{user}/repos`."""

    name: NamePart
    full_name: FullName
    owner: Owner


class ActionRunner(_Model):
    """A runner as `GET .../actions/runners` lists it (1.24+). `status` is `online` or `offline` (no
    contact for a minute); `busy` means it reported on a task in the last 10 s; `disabled` (1.26+):
    Gitea hands it no job."""

    id: Id
    name: Name
    status: Text = ""
    busy: StrictBool = False
    ephemeral: StrictBool = False
    disabled: StrictBool = False


class ActionRunnersResponse(_Model):
    """The body of `GET .../actions/runners`."""

    runners: Annotated[tuple[ActionRunner, ...], BeforeValidator(_none_to_empty)] = ()
    total_count: Count = 0
