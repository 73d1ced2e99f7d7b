"""Pure: what the job records' scripts answer, read into types: the outcome of recording one update
(`Outcome`, `RecordResult`, from `scripts.RECORD`'s reply) and a queued job from its row (`queued_job`,
from `scripts.QUEUED`'s). Must not do I/O: `records` runs the scripts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from webhook_scaler.store.jobs.model import QueuedJob
from webhook_scaler.store.keys import text


class Outcome(StrEnum):
    """What recording one event did."""

    APPLIED = "applied"
    DUPLICATE = "duplicate"  # this delivery id was recorded before
    STALE = "stale"  # older than what is stored: changes nothing
    CONFLICT = "conflict"  # the job is recorded for another repository: changes nothing


@dataclass(frozen=True, slots=True)
class RecordResult:
    """The outcome of recording one update, and the job's state before and after."""

    outcome: Outcome
    previous: str | None
    state: str | None
    moved: bool = False  # applied, and the job id was recorded for another repository before
    # why a CONFLICT: "listed" (a poll listed the job under its recorded repository), "started" (a webhook
    # of a later state than a job's first), "moving" (other moves kept moving it while this one tried)
    reason: str = ""


def record_result(reply: Sequence[bytes | str]) -> RecordResult:
    """The RECORD script's answer, other than 'move' (see `scripts.RECORD`)."""
    parts = [text(p) for p in reply]
    outcome, previous = Outcome(parts[0]), parts[1] or None
    if outcome is Outcome.APPLIED:
        return RecordResult(outcome, previous, parts[2], moved=parts[3] == "1")
    return RecordResult(outcome, previous, previous, reason=parts[2] if outcome is Outcome.CONFLICT else "")


QUEUED_FIELDS = (
    *("state", "labels", "owner", "repo", "name", "run_id", "attempt"),
    *("queued_ms", "listed_ms", "missed", "aged"),
)


def queued_job(job_id: bytes | str, row: Sequence[bytes | None]) -> QueuedJob:
    """A queued job from its row (`JobStore.job_rows`: its `QUEUED_FIELDS` and its claim's holder)."""
    f = [None if v is None else text(v) for v in row]
    return QueuedJob(
        job_id=int(job_id),
        labels=tuple(json.loads(f[1] or "[]")),
        owner=f[2] or "",
        repo=f[3] or "",
        name=f[4] or "",
        run_id=int(f[5] or 0),
        attempt=int(f[6] or 0),
        queued_ms=int(f[7] or 0),
        claimed_by=f[11] if len(f) > 11 else None,
        listed_ms=int(f[8]) if f[8] else None,
        missed=f[9] is not None,
        aged=f[10] is not None,
    )
