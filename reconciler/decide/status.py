"""Pure: the RunnerGroup status a pass wants, with conditions that keep their transition times.

Must not do I/O. The controller writes the result only when it differs from the stored status.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from reconciler.decide.phases import Runner
from reconciler.decide.plan import Backoff, Counts
from reconciler.model.spec import RunnerGroupSpec


@dataclass(frozen=True, slots=True)
class Condition:
    """One status condition, without its transition time."""

    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str


def _conditions(previous: Mapping[str, Any], wanted: Sequence[Condition], *, now: str, generation: int) -> list[Any]:
    old = {c.get("type"): c for c in previous.get("conditions") or [] if isinstance(c, Mapping)}
    out = []
    for c in wanted:
        before = old.get(c.type) or {}
        since = before.get("lastTransitionTime") if before.get("status") == c.status else None
        out.append(
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message[:1000],
                "lastTransitionTime": since or now,
                "observedGeneration": generation,
            }
        )
    return out


REGISTRATION_REFUSED = "registration refused: "  # how `registrations` starts the message of its refusals
SCOPE_MISMATCH = f"{REGISTRATION_REFUSED}a registration token of another scope: "  # `registration_scopes`' own
SEAT_EPOCH = "seatEpoch"  # written by `seating` alone; a pass's status neither sets nor compares it


def pass_fields(status: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a stored status a pass writes: what `desired_status` is compared with."""
    return {k: v for k, v in status.items() if k != SEAT_EPOCH}


def timestamp(moment: datetime) -> str:
    """A status time: UTC, to the second, with a Z."""
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def registration_failed(runner: Runner) -> bool:
    """Whether a failed runner failed to register (its reason is the register container's last line)."""
    return "regist" in runner.reason.lower()


def _health(backoff: Backoff | None, failed: Sequence[Runner]) -> Condition:
    if backoff is None:
        message = "no runner failed since the last one that took a job" if failed else "no failed runner Jobs"
        return Condition("RunnersHealthy", "True", "NoFailures", message)
    last = backoff.last
    retry = timestamp(datetime.fromtimestamp(backoff.retry_at_ms / 1000, UTC))
    reason = "RegistrationFailed" if registration_failed(last) else "RunnerFailed"
    message = (
        f"{backoff.failures} runner(s) failed in a row; no new runner before {retry}. Last: {last.name}: {last.reason}"
    )
    return Condition("RunnersHealthy", "False", reason, message)


def _listed(unlisted: Sequence[str], scope: str) -> Condition:
    if not unlisted:
        message = "Gitea lists every runner asked about where the group can see it"
        return Condition("RunnersListed", "True", "Listed", message)
    message = (
        f"Gitea lists no row of runner(s) {', '.join(sorted(unlisted))} in the group's scope ({scope}) nor in any scope"
        " its API token can list: they registered elsewhere (give the group a registration token of its own scope)."
        " They are not deleted while Gitea cannot say they are idle."
    )
    return Condition("RunnersListed", "False", "NotInScope", message)


def _admitted(refused: Mapping[str, str], create_refused: str) -> Condition:
    if create_refused.startswith(SCOPE_MISMATCH):  # see `registration_scopes`: the runner's row was deleted
        message = f"no runner is started: {create_refused.removeprefix(REGISTRATION_REFUSED)}"
        return Condition("RunnersAdmitted", "False", "RegistrationScopeMismatch", message[:1000])
    if create_refused.startswith(REGISTRATION_REFUSED):  # see `registrations`: nothing was created
        message = f"no runner could be registered with Gitea (their seats are free again): {create_refused}"
        return Condition("RunnersAdmitted", "False", "RegistrationRefused", message[:1000])
    if create_refused:
        message = f"the API server refused to create runner Jobs (their seats are free again): {create_refused}"
        return Condition("RunnersAdmitted", "False", "JobRefused", message[:1000])
    if not refused:
        return Condition("RunnersAdmitted", "True", "Admitted", "the API server admits the runner Jobs and their Pods")
    first = sorted(refused)[0]
    message = (
        f"the API server refuses the Pods of runner Job(s) {', '.join(sorted(refused))}; {first}: {refused[first]}"
    )
    return Condition("RunnersAdmitted", "False", "PodRefused", message[:1000])


def _ready(spec: RunnerGroupSpec | None, invalid: str, error: str, blockers: Sequence[Condition]) -> Condition:
    """Ready is True only when a job of the group can get a runner now: the first other condition that
    is False says why not (Unknown says nothing yet: no poll, say)."""
    if invalid or spec is None:
        return Condition("Ready", "False", "InvalidSpec", invalid or "invalid spec")
    if error:
        return Condition("Ready", "False", "ReconcileFailed", f"stopped until the RunnerGroup changes: {error}")
    if spec.suspend:
        return Condition("Ready", "True", "Suspended", "suspended: no new runners are started")
    blocked = next((c for c in blockers if c.status == "False"), None)
    if blocked is not None:
        return Condition("Ready", "False", blocked.reason, f"{blocked.type}: {blocked.message}")
    return Condition("Ready", "True", "Reconciled", "runners follow the queued jobs")


def failing(previous: Mapping[str, Any], why: str, *, now: datetime, generation: int) -> dict[str, Any]:
    """The stored status with Ready False, `PassFailing`: the group's passes fail again and again (Redis or
    the API server unreachable, say), so none of its counts can be trusted to move."""
    wanted = Condition("Ready", "False", "PassFailing", f"the controller cannot serve this group now: {why}")
    kept = [c for c in previous.get("conditions") or [] if isinstance(c, Mapping) and c.get("type") != "Ready"]
    ready = _conditions(previous, [wanted], now=timestamp(now), generation=generation)
    return {**pass_fields(previous), "conditions": [*ready, *kept]}


def _counted(counts: Counts | None) -> dict[str, int]:
    if counts is None:
        return {"activeRunners": 0, "idleRunners": 0, "queuedJobs": 0}
    return {"activeRunners": counts.active, "idleRunners": counts.idle, "queuedJobs": counts.queued}


def desired_status(
    *,
    generation: int,
    previous: Mapping[str, Any],
    spec: RunnerGroupSpec | None,
    counts: Counts | None,
    now: datetime,
    waiting: Mapping[str, int] = MappingProxyType({}),
    invalid: str,
    gitea: Condition | None,
    last_poll: str | None,
    proven: Condition | None = None,
    webhook: Condition | None = None,
    failed: Sequence[Runner],
    backoff: Backoff | None = None,
    error: str = "",
    unlisted: Sequence[str] = (),
    refused: Mapping[str, str] = MappingProxyType({}),
    create_refused: str = "",
    scope: str = "",
    starved: Condition | None = None,
) -> dict[str, Any]:
    """The whole status object for this pass (`error`: a permanent error that stopped the group; `proven`:
    its `ScopeProven`, none before the controller asked; `webhook`, `starved`: never a reason for un-Ready)."""
    reach = gitea or Condition("GiteaReachable", "Unknown", "NotPolledYet", "no poll of Gitea has finished yet")
    health, listed, admitted = _health(backoff, failed), _listed(unlisted, scope), _admitted(refused, create_refused)
    owned, hooked = (proven,) if proven else (), tuple(c for c in (webhook, starved) if c)
    stamp, ready = timestamp(now), _ready(spec, invalid, error, (reach, *owned, admitted, listed, health))
    status: dict[str, Any] = {
        "target": spec.target if spec else "",
        **_counted(counts),
        "waitingJobs": dict(waiting),
        "observedGeneration": generation,
        "conditions": _conditions(
            previous, [ready, reach, health, listed, admitted, *owned, *hooked], now=stamp, generation=generation
        ),
    }
    if check := last_poll or previous.get("lastCheckTime"):
        status["lastCheckTime"] = check
    return status


def starved(
    spec: RunnerGroupSpec, waiting: Mapping[str, int], *, oldest_wait_s: float, objective_s: float
) -> Condition:
    """`Starved`: True while the group's oldest queued job has waited past the queue-time objective and
    jobs wait for its `maxActiveRunners`; never a reason for `Ready=False` (the group works, at its cap)."""
    capped = waiting.get("maxActiveRunners", 0)
    if capped and oldest_wait_s > objective_s:
        return Condition(
            "Starved", "True", "AtMaxActiveRunners",
            f"the oldest queued job has waited {oldest_wait_s:.0f} s, past the queue-time objective "
            f"({objective_s:g} s), while {capped} job(s) wait for the group's maxActiveRunners "
            f"({spec.max_active_runners}): raise it, or split the group",
        )  # fmt: skip
    if oldest_wait_s <= objective_s:
        return Condition("Starved", "False", "WithinObjective", "within the queue-time objective")
    return Condition("Starved", "False", "NotAtCap", "no job waits for the cap")
