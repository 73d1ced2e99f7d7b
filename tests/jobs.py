"""Builders of Gitea job payloads for tests: the real example delivery with chosen fields changed."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from webhook_scaler.gitea import WorkflowJobPayload

_DATA = Path(__file__).parent / "data" / "gitea" / "webhooks"
_TEMPLATES = {
    "queued": "01-queued.json",
    "waiting": "02-waiting.json",
    "in_progress": "03-in_progress.json",
    "completed": "04-completed-success.json",
}


def payload(
    status: str,
    *,
    job_id: int = 101,
    attempt: int | None = None,
    labels: list[str] | None = None,
    repo: str = "acme/widgets",
    picked: bool | None = None,
    created_at: str | None = None,
) -> dict[str, Any]:
    """A `workflow_job` payload dict in Gitea's shape for the given status, about a job Gitea created now
    (or at `created_at`, RFC 3339)."""
    body: dict[str, Any] = copy.deepcopy(json.loads((_DATA / _TEMPLATES[status]).read_text()))
    job = body["workflow_job"]
    job["id"] = job_id
    job["created_at"] = created_at or gitea_time(time.time())
    owner, name = repo.split("/")
    job["url"] = f"https://gitea.example.com/api/v1/repos/{owner}/{name}/actions/jobs/{job_id}"
    body["repository"]["full_name"] = repo
    body["repository"]["name"] = name
    body["repository"]["owner"]["login"] = owner
    if attempt is not None:
        job["run_attempt"] = attempt
    if labels is not None:
        job["labels"] = labels
    if picked is False:  # a completed event of a job no runner took: cancelled or skipped
        for key in ("runner_id", "runner_name"):
            job.pop(key, None)
        job["steps"] = None
        job["started_at"] = "1970-01-01T00:00:00Z"
        job["conclusion"] = "cancelled"
    return body


def gitea_time(seconds: float) -> str:
    """A time as Gitea writes it in payloads (RFC 3339, UTC, to the second)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def model(status: str, **kw: Any) -> WorkflowJobPayload:
    """The same, parsed."""
    return WorkflowJobPayload.model_validate(payload(status, **kw))


def signed(body: dict[str, Any], *, secret: str, delivery_id: str | None = None) -> tuple[bytes, dict[str, str]]:
    """Bytes and headers as Gitea sends them (2-space JSON, no trailing newline)."""
    raw = json.dumps(body, indent=2).encode()
    signature = hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Gitea-Event": "workflow_job",
        "X-Gitea-Event-Type": "workflow_job",
        "X-Gitea-Delivery": delivery_id or str(uuid.uuid4()),
        "X-Gitea-Signature": signature,
        "X-Hub-Signature-256": "sha256=" + signature,
    }
    return raw, headers


async def stored(redis: Any, job_id: int, *, prefix: str = "grs") -> dict[str, str]:
    """The record Redis holds for one job (empty if none), read directly: what the scripts wrote."""
    raw = await redis.hgetall(f"{{{prefix}}}:job:{job_id}")
    return {_str(k): _str(v) for k, v in raw.items()}


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def claim(coordination: Any, job_id: int, *, holder: str, ttl_ms: int, group_uid: str = "g") -> bool:
    """Claim a queued job the way a create does (`Coordination.take`, with a seat in a roomy group)."""
    epoch = await coordination.epoch(new_id="e")
    taken = await coordination.take(
        group_uid, holder, maximum=1_000_000, epoch=epoch.id, taker="t", job_id=job_id, claim_ttl_ms=ttl_ms
    )
    return bool(taken == "granted")
