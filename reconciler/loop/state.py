"""What the controller remembers about one group between passes (nothing it cannot re-derive)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TypedDict

from reconciler.decide.status import Condition


class Reported(TypedDict):
    """What a group's status takes from the tasks beside its passes (`GroupState.reported`)."""

    gitea: Condition | None
    last_poll: str | None
    proven: Condition | None
    webhook: Condition | None


@dataclass
class GroupState:
    """One group's pass task, retry backoff, last poll result and reporting memory."""

    task: asyncio.Task[None] | None = None
    again: bool = False
    backoff: float = 0.0
    retry_at: float = 0.0
    reported_failures: set[str] = field(default_factory=set)
    last_error: str = ""
    failing: str = ""  # why passes keep failing, once the status says so ("": the last pass did not fail)
    gitea: Condition | None = None
    proven: Condition | None = None  # ScopeProven, as the last round found it (`ownership`; kept while unchanged)
    webhook: Condition | None = None  # WebhookInstalled, as the last webhook cycle found it (GRS_WEBHOOK_MANAGE)
    last_poll: str | None = None
    invalid_generation: int = -1
    # a permanent error stops the group's passes until the group changes: ((generation, annotations), error)
    stopped: tuple[tuple[int, str], str] | None = None
    status_written: float = 0.0  # monotonic time of the last status write
    status_put_off: float = 0.0  # monotonic time a count-only status write was first put off (0: none is)
    quiet_as: tuple[object, ...] | None = (
        None  # (group object, gitea condition, last poll, proven, webhook) found quiet
    )
    timer: asyncio.TimerHandle | None = None  # the wake-up at the group's next deadline
    timer_at_ms: int = 0
    # what the last complete pass started from (see `Scheduler.start`), and whether the next may not skip
    done_as: tuple[object, ...] | None = None
    due: bool = True
    seated: set[str] | None = None  # the seats held after the last pass (None: not read yet)
    epoch: str = ""  # the seat epoch whose active Jobs this replica has seated
    deleting: set[str] = field(default_factory=set)  # runner Jobs we deleted whose seats wait for their Pods to go
    protected: set[str] = field(default_factory=set)  # busy runner Jobs given a PodDisruptionBudget
    unlisted: tuple[str, ...] = ()  # runners kept: no scope the group's API token can list holds their row
    refused: dict[str, str] = field(default_factory=dict)  # Pod-less runner Jobs -> why the API server refused
    refusals_read_ms: int = 0  # when their FailedCreate Events were last read
    create_refused: str = ""  # why the API server refused the last pass's runner Job creates ("": it did not)

    def reported(self) -> Reported:
        """What other tasks found (the poll, the proofs, the webhooks), as the status takes it; a group
        whose every one of them is the same object as before has nothing new to report from them."""
        return Reported(gitea=self.gitea, last_poll=self.last_poll, proven=self.proven, webhook=self.webhook)
