"""Pure: the names of runner Jobs, and the identity of their runners in Gitea.

A runner Job's name is fixed by the (job, attempt) it is for and how many runners for it came before,
so the API server refuses a second Job of that name (the claim's backstop, see `coordination`). Such
a name comes back once the Jobs and Pods of earlier runners are gone. The runner's name in Gitea is
therefore the Job's name with a tag of its own (`{job name}.{group key}{8 random hex}`, recorded on the
Job): no two runners ever have one name, so Gitea's word on a runner (the `busy`/`done` facts its
webhooks leave, its row) is never taken for another's, whatever namespace or time it ran in; and the
group key (of its namespace and name) tells the rows of two groups of one name in two namespaces apart.
A runner Job without the tag on record (made by an earlier release) registered under its bare Job
name; one with an 8-digit tag, without the group key.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Iterable

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_KEYED = 16  # a runner name's tag with its group's key: 8 hex digits of the key, 8 random


def job_name(group: str, suffix: str) -> str:
    """`{group}-{suffix}`, cut to a valid DNS-1123 label of at most 63 characters."""
    suffix = re.sub(r"[^a-z0-9-]", "-", suffix.lower()).strip("-") or "x"
    head = re.sub(r"[^a-z0-9-]", "-", group.lower())[: 62 - len(suffix)].strip("-") or "rg"
    name = f"{head}-{suffix}"
    assert _DNS_LABEL.match(name) and len(name) <= 63, name
    return name


# The suffix of a runner Job's name: `{job id}-{attempt}` for a queued job, `-r{n}` added for its n-th
# replacement, `w-{6 hex}` for a warm runner. (`{job id}-{4 hex}`: runner Jobs of before 0.5.)
RUNNER_SUFFIX = re.compile(r"-(\d+-(?:\d+(?:-r\d+)?|[0-9a-f]{4})|w-[0-9a-f]{6})$")
_JOB_SUFFIX = re.compile(r"-(?P<job>\d+)-(?P<attempt>\d+)(?:-r(?P<retry>\d+))?$")


def runner_suffix(job_id: int | None, *, attempt: int = 0, retry: int = 0, random_hex: str = "") -> str:
    """The name suffix of a new runner Job: fixed by the (job, attempt) it is for and how many runners
    for it came before, so the API server refuses a second; warm ones take 6 random hex digits."""
    if job_id is None:
        return f"w-{random_hex[:6]}"
    return f"{job_id}-{attempt}" + (f"-r{retry}" if retry else "")


def runner_retry(name: str, *, job_id: int, attempt: int) -> int | None:
    """Which runner for (job, attempt) the Job called `name` is (0 = the first), or None if none."""
    m = _JOB_SUFFIX.search(name)
    if m is None or int(m["job"]) != job_id or int(m["attempt"]) != attempt:
        return None
    return int(m["retry"] or 0)


def next_runner_name(group: str, job_id: int | None, *, attempt: int, before: Iterable[str], random_hex: str) -> str:
    """A new runner Job's name: fixed by (job, attempt) and how many runners for it came `before` (the
    names of its group's Jobs, a stale claim's holder, Jobs deleted whose Pods are still going), so a
    name does not come back while the Pod of an earlier runner is left. A seat alone is no reason to
    avoid a name: a create in flight holds one, and its name must stay the same, so that a second
    create of it gets a 409 (the claim's backstop, see `coordination`). Warm runners take `random_hex`."""
    if job_id is None:
        return job_name(group, runner_suffix(None, random_hex=random_hex))
    seen = [t for t in (runner_retry(n, job_id=job_id, attempt=attempt) for n in before) if t is not None]
    return job_name(group, runner_suffix(job_id, attempt=attempt, retry=max(seen) + 1 if seen else 0))


def runner_job(name: str) -> int | None:
    """The Gitea job the runner Job called `name` was made for (None: a warm runner's)."""
    m = _JOB_SUFFIX.search(name)
    return None if m is None else int(m["job"])


def runner_name(job: str, tag: str | None = None, *, group: str = "") -> str:
    """A new runner's name in Gitea: its Job's name, its group's key (`group_key`) and a random tag (`tag`,
    for tests: a given one)."""
    return f"{job}.{group}{tag or uuid.uuid4().hex[:8]}"


def group_key(namespace: str, name: str) -> str:
    """8 hex digits of the group's namespace and name: in its runners' names in Gitea, so that groups of one
    name in two namespaces (whose runner Jobs are named alike) never take each other's runner rows."""
    return hashlib.sha256(f"{namespace}/{name}".encode()).hexdigest()[:8]


def of_group(runner: str, namespace: str, name: str) -> bool:
    """Whether a runner named so in Gitea may be one of the group's: its group key is the group's, or it has
    none (named by a release before the key: only its Job's name tells)."""
    tag = runner.split(".", 1)[1] if "." in runner else ""
    return len(tag) != _KEYED or tag[:8] == group_key(namespace, name)


def job_of_runner(runner: str) -> str:
    """The name of the runner Job whose runner is called `runner` in Gitea."""
    return runner.split(".", 1)[0]
