"""Pure: which groups may take the jobs of their scope, by proof and by the admin's pin.

A RunnerGroup names a scope (an org, a user, a repository, the instance); naming it proves nothing.
A group takes jobs of its scope only while its own API token has proven, within `WINDOW` seconds,
that it administers that scope: Gitea listed the scope's runners to it (owners and site admins
only), and for a user scope the token is that user's. A proof is a fact with a time (`Proof`),
kept per (Gitea URL, scope, API token): Gitea refusing the token (401, 403, 404) withdraws it at
once, Gitea not answering does not, until it is `WINDOW` old. A group whose registrations Gitea
refused lately (`REFUSED_HOLD`) is demoted: it gets only the jobs no other group can take.

The cluster admin may also pin the Gitea owners each namespace may serve (`GRS_NAMESPACE_OWNERS`):
a group naming another owner is refused (`pinned`). Must not do I/O; the clock is an argument.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reconciler.decide.instances import G, View
from reconciler.decide.status import Condition
from reconciler.model.spec import RunnerGroupSpec

WINDOW = 600.0  # seconds a proof lasts while Gitea does not answer (it is asked again every GRS_POLL_INTERVAL)
REFUSED_HOLD = 600.0  # seconds a group whose registrations Gitea refused is demoted, then it tries again
REFUSING = frozenset({401, 403, 404})  # Gitea says the token may not administer the scope, or cannot see it
PIN_SETTING = "GRS_NAMESPACE_OWNERS (the chart's namespaceOwners)"

Key = tuple[str, str]  # a group's namespace and name
Pins = Mapping[str, frozenset[str] | None]  # namespace -> the owners it may serve (lower-case); None: any


@dataclass(frozen=True, slots=True)
class Proof:
    """What one (Gitea URL, scope, API token) has shown: when it last proved that it administers the
    scope (None: never, or Gitea refused it since), when it was last asked, and why that ask did not
    prove it ("": it did), with Gitea's HTTP status if Gitea answered."""

    proven_at: float | None
    asked_at: float
    why: str = ""
    status: int | None = None
    refused: bool = False  # the last ask: Gitea said the token may not (it will not change by asking again)


def asked(
    before: Proof | None, *, now: float, why: str = "", status: int | None = None, refused: bool = False
) -> Proof:
    """The fact after one ask at `now` ("" `why`: the token proved it). A refusal (HTTP 401, 403, 404, or
    `refused`: Gitea answered that the token is not the scope's) withdraws an older proof; Gitea not
    answering (no status, 429, 5xx) keeps it until it is `WINDOW` old."""
    if not why:
        return Proof(proven_at=now, asked_at=now)
    refused = refused or status in REFUSING
    kept = None if refused or before is None else before.proven_at
    return Proof(proven_at=kept, asked_at=now, why=why, status=status, refused=refused)


def holds(proof: Proof | None, *, now: float, window: float = WINDOW) -> bool:
    """Whether `proof` proves the scope now."""
    return proof is not None and proof.proven_at is not None and now - proof.proven_at < window


def due(proof: Proof | None, *, now: float, retry: float) -> bool:
    """Whether to ask again: never asked, or last asked `retry` seconds ago (whatever the answer: a token
    revoked since is found out within `retry`, not within the window)."""
    return proof is None or now - proof.asked_at >= retry


def where(spec: RunnerGroupSpec) -> str:
    """The scope in words: `org acme`, `repo acme/widgets`, `the instance`."""
    return "the instance (global)" if spec.scope == "global" else f"{spec.scope} {spec.target}"


def condition(proof: Proof | None, spec: RunnerGroupSpec, *, now: float, unread: str = "") -> Condition:
    """The group's `ScopeProven` condition, from the fact about its (Gitea, scope, API token), or why its
    token could not be read (`unread`)."""
    scope = where(spec)
    if holds(proof, now=now):
        message = f"the group's API token administers {scope}: Gitea lists the scope's runners to it"
        return Condition("ScopeProven", "True", "Proven", message)
    if proof is not None and proof.refused:
        message = (
            f"the group's API token cannot administer {scope}: {proof.why}. The group takes no job of the scope; "
            "they go to a group whose token can. Give it an API token of an owner of the scope "
            "(write:repository, write:organization or write:user, as the scope asks; site admins: write:admin)"
        )
        return Condition("ScopeProven", "False", "TokenCannotAdminister", message)
    why = unread or (proof.why if proof is not None else "") or "not asked yet"
    message = (
        f"no proof yet that the group's API token administers {scope} ({why}): until there is one, the group "
        "takes no job; Gitea is asked again shortly"
    )
    return Condition("ScopeProven", "False", "NotProven", message)


def demoted(refused_since: float | None, *, now: float, hold: float = REFUSED_HOLD) -> bool:
    """Whether a group whose registrations Gitea refused since `refused_since` gets only the jobs no other
    group can take."""
    return refused_since is not None and now - refused_since < hold


def owner_of(spec: RunnerGroupSpec) -> str | None:
    """The Gitea owner whose jobs the group serves (lower-case); None for a global group (every owner)."""
    if spec.scope == "global":
        return None
    return spec.target.split("/", 1)[0].lower()


def pinned(views: Sequence[View[G]], pins: Pins | None) -> list[View[G]]:
    """`views` with each valid group that serves an owner its namespace may not (`pins`; None: no pin)
    turned invalid, and why. A group being deleted is never refused (its drain still needs its Gitea)."""
    if pins is None:
        return list(views)
    out: list[View[G]] = []
    for group, spec, problem in views:
        refused = "" if spec is None or group.deleting else _refused(group.namespace, spec, pins)
        out.append((group, None, refused) if refused else (group, spec, problem))
    return out


def _refused(namespace: str, spec: RunnerGroupSpec, pins: Pins) -> str:
    if namespace not in pins:
        return f"namespace {namespace} may serve no Gitea owner: {PIN_SETTING} does not name it"
    allowed = pins[namespace]
    owner = owner_of(spec)
    if allowed is None or (owner is not None and owner in allowed):
        return ""
    named = f"spec.{spec.scope} {spec.target}" if owner is not None else "spec.scope global (every owner)"
    return (
        f"{named}: namespace {namespace} may serve only the Gitea owners {', '.join(sorted(allowed))} "
        f"({PIN_SETTING}); ask the cluster admin to pin another owner"
    )
