"""Which groups a round gives jobs to: those whose own API token proved, lately, that it administers
their scope (`decide.ownership`), and the admin's pin of the owners each namespace may serve.

Owns: asking Gitea, for each distinct (Gitea URL, scope, API token) of the valid groups, whether the
token administers the scope (`Prover`): at once for a group new or changed (a round asks), then every
`GRS_POLL_INTERVAL`, the poll on or off; the facts (`Proof`), kept per (Gitea URL, scope, API token);
each group's `ScopeProven` condition; the groups a round leaves out (not proven) or demotes (Gitea
refused their registrations lately: `REGISTRATION_REFUSED` in the last pass's create refusal); and
the pin (`GRS_NAMESPACE_OWNERS`). Tokens stay in memory: never logged, in an error or in a status.
Must not touch Redis; Kubernetes only through `Kube.secret_value`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from reconciler.decide import ownership
from reconciler.decide.assign import Standing
from reconciler.decide.instances import View
from reconciler.decide.ownership import Key, Proof
from reconciler.decide.status import REGISTRATION_REFUSED, Condition
from reconciler.gitea.api import GiteaClient, GiteaError, PollScope
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.objects import GroupObject
from reconciler.loop.rounds.group_views import contained
from reconciler.loop.scopes import scope_of
from reconciler.loop.state import GroupState
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from reconciler.settings import Settings

log = logging.getLogger(__name__)
Views = Iterable[View[GroupObject]]
Read = tuple[tuple[str, str, str], PollScope | str]  # what a group's scope was read for (`_asks`), and it or why not


def _asks(spec: RunnerGroupSpec) -> tuple[str, str, str]:
    """What of a spec its proof depends on: where its runners register, and its API token's Secret key."""
    return spec.registered_at, spec.auth_token.secret_ref.name, spec.auth_token.secret_ref.key


class Prover(Protocol):
    """Asks Gitea whether an API token administers a scope."""

    async def prove(self, scope: PollScope) -> str:
        """ "" if the token administers the scope; else Gitea's answer that it does not. GiteaError when
        Gitea refused the call (its status) or did not answer."""
        ...


@dataclass(frozen=True, slots=True)
class GiteaProver:
    """The scope's runners listed with the token (owners and site admins only); for a user scope, the
    token is that user's (`/user/actions/runners` lists the runners of the token's own user)."""

    gitea: GiteaClient

    async def prove(self, scope: PollScope) -> str:
        """See `Prover.prove`."""
        if scope.kind == "user":
            login = await self.gitea.login(scope)
            if login.lower() != scope.target.lower():
                return f"GET /user: the API token is user {login}'s, not {scope.target}'s"
        await self.gitea.administers(scope)
        return ""


class Ownership:
    """The proofs of every group of one controller, and the pin."""

    def __init__(
        self,
        settings: Settings,
        *,
        kube: Kube,
        prover: Prover,
        metrics: Metrics,
        views: Callable[[], Views],
        wake: Callable[[], None],
        clock: Callable[[], float],
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.prover = prover
        self.metrics = metrics
        self.views = views  # every group with its validated spec, or None and why (`Controller.views`)
        self.wake = wake
        self.clock = clock
        self.facts: dict[PollScope, Proof] = {}  # by (Gitea URL, scope, API token)
        self.scopes: dict[Key, Read] = {}  # each group's, as last read
        self.refused_since: dict[Key, float] = {}  # groups whose registrations Gitea refused, since when
        self.asked = asyncio.Event()  # a round found a group whose scope was not read for its spec
        self.tried = asyncio.Event()  # the first proofs were asked for (the first round waits for them)
        self.proved = asyncio.Event()  # set when a cycle changed a proof (the managed webhooks look again)

    def pinned(self, views: list[View[GroupObject]]) -> list[View[GroupObject]]:
        """`views` with the groups serving an owner their namespace may not turned invalid (`ownership.pinned`)."""
        return ownership.pinned(views, self.settings.pins)

    def standing(self, views: Views, state_of: Callable[[GroupObject], GroupState]) -> Standing:
        """Which valid groups take no job (not proven) or only jobs no other group takes (demoted); each
        group's `ScopeProven` condition is set in its state (the object kept while it is unchanged)."""
        now, unproven, demoted, seen = self.clock(), set(), set(), set()
        for group, spec, _ in views:
            key = (group.namespace, group.name)
            seen.add(key)
            state = state_of(group)
            proven = None if spec is None else self._condition(key, spec, now)
            if state.proven != proven:
                state.proven = proven
            if spec is None or proven is None:
                continue
            if proven.status != "True":
                unproven.add(key)
            if self._demoted(key, state, now):
                demoted.add(key)
        self.refused_since = {k: t for k, t in self.refused_since.items() if k in seen}
        return Standing(frozenset(unproven), frozenset(demoted))

    def proven(self, views: Views) -> dict[Key, PollScope]:
        """The (Gitea URL, scope, API token) of each valid group not being deleted whose token proves its scope now."""
        out: dict[Key, PollScope] = {}
        for group, spec, _ in views:
            read = self.scopes.get((group.namespace, group.name))
            if spec is None or group.deleting or read is None or read[0] != _asks(spec):
                continue
            if isinstance(read[1], PollScope) and ownership.holds(self.facts.get(read[1]), now=self.clock()):
                out[(group.namespace, group.name)] = read[1]
        return out

    def _condition(self, key: Key, spec: RunnerGroupSpec, now: float) -> Condition:
        read = self.scopes.get(key)
        if read is None or read[0] != _asks(spec):
            self.asked.set()  # new or changed: the prover reads its token and asks Gitea now
            return ownership.condition(None, spec, now=now)
        if isinstance(read[1], str):
            return ownership.condition(None, spec, now=now, unread=read[1])
        return ownership.condition(self.facts.get(read[1]), spec, now=now)

    def _demoted(self, key: Key, state: GroupState, now: float) -> bool:
        """Whether Gitea refused the group's registrations in the last `REFUSED_HOLD` seconds. Then its last
        refusal is forgotten, so that it takes jobs again, and its next pass says whether Gitea still refuses."""
        if not state.create_refused.startswith(REGISTRATION_REFUSED):
            self.refused_since.pop(key, None)
            return False
        since = self.refused_since.setdefault(key, now)
        if ownership.demoted(since, now=now):
            return True
        del self.refused_since[key]
        state.create_refused = ""
        return False

    async def prove_forever(self) -> None:
        """Prove the groups' scopes (`prove_once`) every `GRS_POLL_INTERVAL`, and at once when a round asks."""
        while True:
            self.asked.clear()
            try:
                await self.prove_once(self.views())
            except Exception:  # never let one bad cycle stop the proofs for good
                log.exception("proving the groups' scopes failed")
            finally:
                self.tried.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.asked.wait(), self.settings.poll_interval)

    async def prove_once(self, views: Views) -> None:
        """Read each valid group's (Gitea URL, scope, API token), and ask Gitea about those that are due."""
        scopes = await self._read(views)
        now = self.clock()
        wanted = {s for _, s in scopes.values() if isinstance(s, PollScope)}
        due = [s for s in wanted if ownership.due(self.facts.get(s), now=now, retry=self.settings.poll_interval)]
        proofs = await asyncio.gather(*(self._ask(s) for s in due))
        facts = {s: p for s, p in {**self.facts, **dict(zip(due, proofs, strict=True))}.items() if s in wanted}
        changed = bool(due) or scopes != self.scopes
        self.facts, self.scopes = facts, scopes
        if changed:
            self.wake()
            self.proved.set()

    async def _read(self, views: Views) -> dict[Key, Read]:
        tokens: dict[tuple[str, str, str], str | Exception] = {}
        out: dict[Key, Read] = {}
        for group, spec, _ in views:
            if spec is None:
                continue
            key, asks = (group.namespace, group.name), _asks(spec)
            try:
                out[key] = (asks, await scope_of(self.kube, spec, group.namespace, cache=tokens))
            except (PermanentError, TransientError) as exc:
                out[key] = (asks, f"its API token cannot be read: {exc}")
            except Exception as exc:  # one group's objects never stop the proofs of the others
                out[key] = (asks, contained(self.metrics, group, "prove", exc))
        return out

    async def _ask(self, scope: PollScope) -> Proof:
        before, now = self.facts.get(scope), self.clock()
        try:
            refusal = await self.prover.prove(scope)
        except GiteaError as exc:
            proof = ownership.asked(before, now=now, why=str(exc), status=exc.status)
        else:
            proof = ownership.asked(before, now=now, why=refusal, refused=bool(refusal))
        if proof.why and (before is None or before.why != proof.why):
            extra = {"scope": repr(scope), "error": proof.why, "status": proof.status}
            log.warning("a group's API token did not prove its scope", extra=extra)
        return proof
