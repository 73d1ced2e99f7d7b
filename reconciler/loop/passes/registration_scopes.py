"""Whether a registration token a group gives registers its runners in the group's own scope.

A token of another scope registers runners that Gitea never hands the group's jobs (a user group given
an org's token makes org runners), or hands them other owners' jobs: they sit idle, and each new job
adds one until the group is full. So the first runner registered with a token the group's Secret gives
(`registrationToken`) is looked for in the group's scope with the group's API token
(`GET {scope}/actions/runners/{id}`: Gitea shows a runner only in its own scope). The instance's
admin endpoints show every runner, so for a global group the token is compared with the instance's own
instead (fetching it needs `write:admin`; Gitea keeps one active token per scope).

Owns: that check; its verdict, kept per (where the group registers, the token's hash), so that a token
costs one check, not one per runner, and a new token in the Secret is checked again; on a mismatch,
where the runner landed (looked for where the group's API token can see: a repository's owner, the
token's user and its orgs), its row deleted there or through the instance (a site admin's token), and a
refusal naming both scopes (`TransientError(refused=...)`: nothing is created, the seat is free again).
A check Gitea could not answer gives no verdict (the runner starts; the next one is checked); one the
API token may not make (401, 403) is not made again for UNVERIFIED_S. Never logs or raises a token.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace

from reconciler.decide.status import SCOPE_MISMATCH
from reconciler.gitea.api import GiteaError, PollScope
from reconciler.gitea.register import Registrar, Registration
from reconciler.kube.api import TransientError
from reconciler.model.spec import RunnerGroupSpec

log = logging.getLogger(__name__)
UNVERIFIED_S = 600.0  # a token the API token could not check is checked again after this long
Key = tuple[str, str]  # (where the group registers, the token's sha256)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a token registers in the group's scope (None: it could not be checked), and when said;
    a mismatch's refusal message."""

    matched: bool | None
    at: float
    message: str = ""


def describe(scope: PollScope) -> str:
    """A scope as the messages name it: "org acme", "repo acme/widgets", "the instance"."""
    if scope.kind == "global":
        return "the instance"
    return f"{scope.kind} {scope.target}" if scope.target else "the API token's user"


class ScopeChecks:
    """The verdicts on the registration tokens groups give, for one controller."""

    def __init__(self, registrar: Registrar, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.registrar = registrar
        self.clock = clock
        self._verdicts: dict[Key, Verdict] = {}
        self._locks: dict[Key, asyncio.Lock] = {}

    @staticmethod
    def key(spec: RunnerGroupSpec, token: str) -> Key:
        """The verdict's key: where the group registers, and the token's hash (never the token)."""
        return spec.registered_at, hashlib.sha256(token.encode()).hexdigest()

    def known(self, key: Key) -> Verdict | None:
        """The verdict on this token for this group, if there is one still good."""
        verdict = self._verdicts.get(key)
        if verdict is not None and verdict.matched is None and self.clock() - verdict.at >= UNVERIFIED_S:
            return None
        return verdict

    def lock(self, key: Key) -> asyncio.Lock:
        """Held from a Register to its verdict: runners created at once wait for the first one's."""
        return self._locks.setdefault(key, asyncio.Lock())

    async def check(
        self, key: Key, scope: PollScope, done: Registration, *, token: str, fetch: Callable[[], Awaitable[str]]
    ) -> None:
        """Check where the runner `done`, registered with `token`, landed (`scope`: the group's, with its
        API token; `fetch`: the scope's own registration token) and keep the verdict. A mismatch deletes
        its row where the API token can, and raises the refusal (`refusal`)."""
        try:
            here = await fetch() == token if scope.kind == "global" else await self.registrar.holds(scope, done.id)
        except GiteaError as exc:
            if exc.status in (401, 403):
                self._keep(key, Verdict(None, self.clock()))
            log.warning(
                "registration token's scope not checked",
                extra={"runner": done.name, "scope": describe(scope), "error": str(exc)},
            )
            return
        if here:
            self._keep(key, Verdict(True, self.clock()))
            return
        landed, row = await self._remove(scope, done)
        log.warning(
            "runner registered outside its group's scope",
            extra={"runner": done.name, "id": done.id, "scope": describe(scope), "landed": landed, "row": row},
        )
        self._keep(key, Verdict(False, self.clock(), f"runner {done.name} registered {landed or 'outside it'}; {row}"))

    @staticmethod
    def refusal(verdict: Verdict, spec: RunnerGroupSpec, *, secret: str, refused: str) -> TransientError:
        """The create refusal (`refused`: its reason) of a token that registers outside the group's scope
        (`secret`: where the token is)."""
        scope = "the instance" if spec.scope == "global" else f"{spec.scope} {spec.target}"
        message = (
            f"{SCOPE_MISMATCH}the registrationToken ({secret}) is not of the group's scope ({scope}): "
            f"{verdict.message}. Give the group the registration token of {scope}, or remove registrationToken "
            "and the controller fetches it with the API token."
        )
        return TransientError(message, refused=refused)

    def _keep(self, key: Key, verdict: Verdict) -> None:
        self._verdicts[key] = verdict
        self._locks.pop(key, None)

    async def _remove(self, scope: PollScope, done: Registration) -> tuple[str, str]:
        """Find and delete the row of a runner that landed outside `scope`: where it landed if known ("" if
        not: the API token cannot see it), and what became of its row. Its row is deleted where it was
        found, else through the instance (a site admin's token reaches every runner)."""
        errors: list[str] = []
        found = await self._find(scope, done.id)
        landed = f"in {describe(found)}" if found else ""
        for where in ([found] if found else []) + [replace(scope, kind="global", target="")]:
            try:
                if await self.registrar.unregister(where, done.id):
                    return landed, f"its row was deleted through {describe(where)}"
            except GiteaError as exc:
                errors.append(f"{describe(where)}: {exc}")
        why = "; ".join(errors) or "no scope it may reach holds it"
        return landed, f"its row (id {done.id}) is left in Gitea, the API token cannot delete it ({why}): delete it"

    async def _find(self, scope: PollScope, runner_id: int) -> PollScope | None:
        """The scope beyond the group's that holds the runner, of those its API token can ask: a repository's
        owner, the token's user, the token's user's orgs (with `read:organization`); None if none does."""
        tried = {(scope.kind, scope.target)}
        nearby = [replace(scope, kind="org", target=scope.target.split("/", 1)[0])] if scope.kind == "repo" else []
        nearby += [replace(scope, kind="user", target="")] if scope.kind != "user" else []
        try:
            nearby += [replace(scope, kind="org", target=org) for org in await self.registrar.orgs(scope)]
        except GiteaError as exc:
            log.debug("the API token's orgs not listed", extra={"error": str(exc)})
        for where in nearby:
            if (where.kind, where.target) in tried:
                continue
            tried.add((where.kind, where.target))
            try:
                if await self.registrar.holds(where, runner_id):
                    return where
            except GiteaError:
                continue  # the token has no say there (403), or no answer: look on
        return None
