"""The values the reconciler's coordination (`coordination`) reads out of Redis, and their parsing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook_scaler.store.keys import text


@dataclass(frozen=True, slots=True)
class Activity:
    """Gitea's word on runners: busy ones (`in_progress`), and when the job of others completed; and
    which of the jobs asked about are still queued."""

    busy: set[str]
    done_ms: dict[str, int]
    queued: set[int] = field(default_factory=set)
    busy_ms: dict[str, int] = field(default_factory=dict)  # busy runners: since when (Redis ms)


@dataclass(frozen=True, slots=True)
class Epoch:
    """The seats' current epoch, when it started, and Redis' clock when it was read (ms)."""

    id: str
    started_ms: int
    now_ms: int


@dataclass(frozen=True, slots=True)
class Seats:
    """A group's seats after a pass's changes: name -> seated at (Redis ms), and Redis' clock then."""

    now_ms: int
    held: dict[str, int]


@dataclass(frozen=True, slots=True)
class Begun:
    """The start of a pass (`begin`): whether the lease was free, and unless the epoch was another,
    the group's seats and Gitea's word on its runners, read together."""

    leased: bool
    seats: Seats | None = None
    activity: Activity | None = None


@dataclass(frozen=True, slots=True)
class Abandoned:
    """Seats whose taker was not heard of for `ALIVE_TTL_S`: `dead` ones (a later process of the same
    replica runs: the taker's process is gone, and so is any create it had in flight) and `silent` ones
    (nothing tells a killed taker from a paused one, which may send its create when it resumes)."""

    dead: list[str]
    silent: list[str]


def replica_of(process: str) -> str:
    """The replica (its Pod's name) a process `{replica}/{id}` is of."""
    return process.rpartition("/")[0] or process


def held_of(flat: Sequence[Any]) -> dict[str, int]:
    """A ZRANGE ... WITHSCORES reply of the seats as name -> seated at (ms)."""
    return {text(flat[i]): int(float(text(flat[i + 1]))) for i in range(0, len(flat), 2)}


def activity_of(runners: Sequence[str], jobs: Sequence[int], busy: Any, done: Any, states: Any) -> Activity:
    """An ACTIVITY reply (or BEGIN's part of one) as an `Activity`."""
    busy_ms = {r: int(float(text(v))) for r, v in zip(runners, busy, strict=True) if v}
    return Activity(
        busy=set(busy_ms),
        done_ms={r: int(float(text(v))) for r, v in zip(runners, done, strict=True) if v},
        queued={j for j, s in zip(jobs, states, strict=True) if s and text(s) == "queued"},
        busy_ms=busy_ms,
    )
