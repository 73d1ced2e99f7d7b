"""Runners registered by the controller: the registration token stays here, each Pod gets its own runner's
credential only.

Owns: the registration token of a group's scope, either the one its Secret gives (`registrationToken`,
read with `Kube.secret_value`, which refuses the install's own Secrets) or, without one, the one Gitea
gives the group's API token (`POST {scope}/actions/runners/registration-token`); each is kept up to a
minute (`TOKEN_TTL_S`; the API token too), dropped at once when Gitea refuses it, and a fetched one is
fetched again and tried once more. A given token is checked to register in the group's own scope
(`registration_scopes`). Registering one runner with Gitea (`gitea.register`) under the name and labels
its Job gives it, and handing its `.runner` file to its Job as a Secret the Job owns
(`manifests.credential_secret`). A token that cannot be read or fetched, one Gitea refuses, or one of
another scope is a create refusal (`TransientError(refused=REFUSED)`): the group's `RunnersAdmitted`
condition says so, its seat is free again, and the pass retries with backoff. So is a Register Gitea did
not answer in time (`GRS_REGISTER_TIMEOUT`) or failed (unreachable, 5xx: `refused=UNREGISTERED`): that
runner's create fails, not the pass, and its job is served by a later one. A token Secret that is the
install's own stops the group (PermanentError). Nothing here logs or raises a token.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reconciler.decide.status import REGISTRATION_REFUSED
from reconciler.gitea.api import GiteaError, PollScope
from reconciler.gitea.register import NotEphemeral, Registrar, Registration, RegistrationRefused
from reconciler.kube.api import CREATED_BY, Kube, PermanentError, TransientError
from reconciler.kube.events import COMPONENT, PROTECTED_SECRET
from reconciler.kube.manifests import credential_secret, runner_file
from reconciler.loop.passes.registration_scopes import ScopeChecks, describe
from reconciler.model.labels import effective_labels, label_name
from reconciler.model.spec import RunnerGroupSpec, SecretKeySelector

TOKEN_TTL_S = 60.0
REFUSED = "registration"  # the create refusal's reason (its metric's label)
UNREGISTERED = "registration_failed"  # the same, for a Register Gitea did not answer in time or failed
# The API token's scope a registration token's fetch needs, by group scope (a POST: write).
WRITE_SCOPE = {"repo": "write:repository", "org": "write:organization", "user": "write:user", "global": "write:admin"}
_Where = tuple[str, str, str]  # namespace, Secret name, key
_Fetched = tuple[str, str, str, str]  # Gitea URL, scope, target, the API token's sha256


class Registrations:
    """Registers the runners of every group of one controller."""

    def __init__(self, kube: Kube, registrar: Registrar, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.registrar = registrar
        self.clock = clock
        self.checks = ScopeChecks(registrar, clock=clock)
        self._tokens: dict[_Where, tuple[str, float]] = {}  # -> (a Secret's value, when read)
        self._fetched_tokens: dict[_Fetched, tuple[str, float]] = {}  # -> (the scope's token, when fetched)

    async def register(self, namespace: str, spec: RunnerGroupSpec, runner: str) -> str:
        """Register `runner` for a group of `namespace` with its Gitea: the runner's `.runner` file."""
        labels = effective_labels(spec.labels, spec.default_labels)
        names = [label_name(label) for label in labels]
        if spec.registration_token is None:
            done = await self._register_fetched(namespace, spec, runner, names)
        else:
            done = await self._register_given(namespace, spec, spec.registration_token, runner, names)
        return runner_file(id=done.id, uuid=done.uuid, name=done.name, token=done.token, address=spec.gitea.url,
                           labels=labels)  # fmt: skip

    async def _register_given(
        self, namespace: str, spec: RunnerGroupSpec, given: SecretKeySelector, runner: str, names: Sequence[str]
    ) -> Registration:
        """Register with the token the group's Secret gives; the first runner it registers (those made at
        the same time wait for it) is checked to be in the group's scope (`registration_scopes`)."""
        ref = given.secret_ref
        where, secret = (namespace, ref.name, ref.key), f"Secret {namespace}/{ref.name}, key {ref.key}"
        token = await self._secret(where, "registrationToken")
        key = self.checks.key(spec, token)
        verdict = self.checks.known(key)
        if verdict is None:
            async with self.checks.lock(key):
                verdict = self.checks.known(key)
                if verdict is None:
                    scope = await self._scope(namespace, spec)  # before a row is made: the check needs it
                    done = await self._given(where, spec, token, runner, names, secret=secret)
                    await self.checks.check(key, scope, done, token=token, fetch=lambda: self._fetch(scope))
                    verdict = self.checks.known(key)
                    if verdict is None or verdict.matched is not False:
                        return done
        if verdict.matched is False:
            raise self.checks.refusal(verdict, spec, secret=secret, refused=REFUSED)
        return await self._given(where, spec, token, runner, names, secret=secret)

    async def _given(
        self, where: _Where, spec: RunnerGroupSpec, token: str, runner: str, names: Sequence[str], *, secret: str
    ) -> Registration:
        try:
            return await self._rpc(spec, token, runner, names)
        except RegistrationRefused as exc:
            self._tokens.pop(where, None)  # perhaps rotated since: read it again next time
            raise TransientError(f"{REGISTRATION_REFUSED}Gitea refused the registrationToken ({secret}): {exc}",
                                 refused=REFUSED) from None  # fmt: skip

    async def _register_fetched(
        self, namespace: str, spec: RunnerGroupSpec, runner: str, names: Sequence[str], *, again: bool = True
    ) -> Registration:
        """Register with the registration token of the group's scope that its API token fetches: one kept
        that Gitea refuses is fetched again and tried once more (`again`)."""
        scope = await self._scope(namespace, spec)
        kept = self._kept(scope) is not None
        token = await self._fetched(namespace, spec, scope)
        try:
            return await self._rpc(spec, token, runner, names)
        except RegistrationRefused as exc:
            self._fetched_tokens.pop(_fetched_key(scope), None)
            if not (kept and again) or isinstance(exc, NotEphemeral):
                raise TransientError(f"{REGISTRATION_REFUSED}Gitea refused the registration token of {describe(scope)} "
                                     f"it gave the API token: {exc}", refused=REFUSED) from None  # fmt: skip
        return await self._register_fetched(namespace, spec, runner, names, again=False)

    async def _fetched(self, namespace: str, spec: RunnerGroupSpec, scope: PollScope) -> str:
        """The scope's registration token (`_fetch`); a failure is a create refusal saying what the API
        token needs."""
        try:
            return await self._fetch(scope)
        except GiteaError as exc:
            ref = spec.auth_token.secret_ref
            said = (f"{REGISTRATION_REFUSED}the authToken (Secret {namespace}/{ref.name}, key {ref.key}) did not get "
                    f"the registration token of {describe(scope)}: {exc}")  # fmt: skip
            if exc.status in (401, 403):
                raise TransientError(f"{said}; it needs {WRITE_SCOPE[scope.kind]}", refused=REFUSED) from None
            # 404: no such scope (or a Gitea before 1.24); else Gitea did not answer: this runner only
            raise TransientError(said, refused=REFUSED if exc.status == 404 else UNREGISTERED) from None

    async def _fetch(self, scope: PollScope) -> str:
        """The scope's registration token as kept, or fetched with its API token (then kept): GiteaError if
        Gitea refuses or does not answer."""
        token = self._kept(scope)
        if token is None:
            token = await self.registrar.registration_token(scope)
            self._fetched_tokens[_fetched_key(scope)] = (token, self.clock())
        return token

    def _kept(self, scope: PollScope) -> str | None:
        kept = self._fetched_tokens.get(_fetched_key(scope))
        return kept[0] if kept is not None and self.clock() - kept[1] < TOKEN_TTL_S else None

    async def _rpc(self, spec: RunnerGroupSpec, token: str, runner: str, names: Sequence[str]) -> Registration:
        """Gitea's Register; RegistrationRefused passes, another failure is this runner's create refusal."""
        try:
            return await self.registrar.register(spec.gitea.url, token, name=runner, labels=names)
        except RegistrationRefused:
            raise
        except GiteaError as exc:  # slow (a burst of registrations on one database) or down: this runner only
            raise TransientError(f"{REGISTRATION_REFUSED}Gitea did not register the runner, retried later: {exc}",
                                 refused=UNREGISTERED) from None  # fmt: skip

    async def _scope(self, namespace: str, spec: RunnerGroupSpec) -> PollScope:
        """The group's (Gitea URL, scope, API token), the token read as `_secret` reads."""
        ref = spec.auth_token.secret_ref
        token = await self._secret((namespace, ref.name, ref.key), "authToken")
        return PollScope(spec.gitea.url, spec.scope, "" if spec.scope == "global" else spec.target, token)

    @property
    def timeout_s(self) -> float:
        """How long a Register may take (`GRS_REGISTER_TIMEOUT`), in seconds."""
        return self.registrar.timeout.total or 0.0

    async def hand_over(self, job: Mapping[str, Any], uid: str, file: str) -> None:
        """Give the runner Job (created with `uid`) its runner's `.runner` file, in a Secret it owns, named
        as the runner. Runner names are never given twice, so one already there is not this runner's:
        a failure to retry."""
        secret = credential_secret(job, uid=uid, file=file, labels={CREATED_BY: COMPONENT})
        if await self.kube.create_secret(secret) is None:
            meta = secret["metadata"]
            raise TransientError(f"Secret {meta['namespace']}/{meta['name']} is there already, not this runner's")

    async def _secret(self, where: _Where, field: str) -> str:
        """A Secret key's value (`field`: the spec field naming it), read at most once a TOKEN_TTL_S."""
        cached = self._tokens.get(where)
        if cached is not None and self.clock() - cached[1] < TOKEN_TTL_S:
            return cached[0]
        try:
            token = await self.kube.secret_value(*where)
        except PermanentError as exc:
            if PROTECTED_SECRET in str(exc):
                raise
            raise TransientError(f"{REGISTRATION_REFUSED}{field}: {exc}", refused=REFUSED) from None
        self._tokens[where] = (token, self.clock())
        return token


def _fetched_key(scope: PollScope) -> _Fetched:
    """Where a fetched registration token is kept: the scope, and its API token's hash (never the token)."""
    return scope.url, scope.kind, scope.target, hashlib.sha256(scope.token.encode()).hexdigest()
