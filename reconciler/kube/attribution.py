"""Pure: what a runner Job and its Pod say about the Gitea job they were started for, for cost attribution
and for finding a repository's runners (`kubectl get pods -l gitea.bpg.pw/repository=widgets`).

Labels where the value fits a label (at most 63 characters, alphanumeric at both ends, `-_.` inside):
`gitea.bpg.pw/owner`, `gitea.bpg.pw/repository` (the name within its owner), `gitea.bpg.pw/run-id`,
`gitea.bpg.pw/attempt` (the run attempt the runner takes: Gitea's `run_attempt` + 1). Annotations
always: `gitea.bpg.pw/repository` (`owner/name`), `gitea.bpg.pw/job-name`, `gitea.bpg.pw/job-url` (the
job in Gitea's API). The job id is the Job's `gitea.bpg.pw/job-id` annotation (`manifests`). A warm
runner, started for no job, carries none of these. Must not do I/O.
"""

from __future__ import annotations

import re
from urllib.parse import quote

from webhook_scaler.store.jobs.model import QueuedJob

PREFIX = "gitea.bpg.pw/"
_LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def of(job: QueuedJob, gitea_url: str) -> tuple[dict[str, str], dict[str, str]]:
    """(labels, annotations) of the runner for `job`, of the Gitea at `gitea_url`."""
    owner, _, name = job.repo.partition("/")
    candidates = {"owner": owner, "repository": name, "attempt": str(job.attempt + 1)}
    candidates |= {"run-id": str(job.run_id)} if job.run_id > 0 else {}  # 0: a record that did not say
    labels = {PREFIX + key: value for key, value in candidates.items() if _LABEL_VALUE.match(value)}
    url = f"{gitea_url.rstrip('/')}/api/v1/repos/{quote(owner)}/{quote(name)}/actions/jobs/{job.job_id}"
    annotations = {PREFIX + "repository": job.repo, PREFIX + "job-name": job.name, PREFIX + "job-url": url}
    return labels, annotations
