"""Runners registered by the controller: the registration token stays here, each Pod gets its own runner's
credential only.

Owns: reading a group's registration token (`Kube.secret_value`, which refuses the install's own
Secrets) at most once a minute, and again at once after Gitea refused it; registering one runner with
Gitea (`gitea.register`) under the name and labels its Job gives it; and handing its `.runner` file to
its Job as a Secret the Job owns (`manifests.credential_secret`). A token Secret that is missing, or one
Gitea refuses, is a create refusal (`TransientError(refused=REFUSED)`): the group's `RunnersAdmitted`
condition says so, its seat is free again, and the pass retries with backoff. So is a Register Gitea did
not answer in time (`GRS_REGISTER_TIMEOUT`) or failed (unreachable, 5xx: `refused=UNREGISTERED`): that
runner's create fails, not the pass, and its job is served by a later one. A token Secret that is
the install's own stops the group (PermanentError). Nothing here logs or raises a token.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from reconciler.decide.status import REGISTRATION_REFUSED
from reconciler.gitea.api import GiteaError
from reconciler.gitea.register import Registrar, RegistrationRefused
from reconciler.kube.api import CREATED_BY, Kube, PermanentError, TransientError
from reconciler.kube.events import COMPONENT, PROTECTED_SECRET
from reconciler.kube.manifests import credential_secret, runner_file
from reconciler.model.labels import effective_labels, label_name
from reconciler.model.spec import RunnerGroupSpec

TOKEN_TTL_S = 60.0
REFUSED = "registration"  # the create refusal's reason (its metric's label)
UNREGISTERED = "registration_failed"  # the same, for a Register Gitea did not answer in time or failed
_Where = tuple[str, str, str]  # namespace, Secret name, key


class Registrations:
    """Registers the runners of every group of one controller."""

    def __init__(self, kube: Kube, registrar: Registrar) -> None:
        self.kube = kube
        self.registrar = registrar
        self._tokens: dict[_Where, tuple[str, float]] = {}  # -> (token, when read, monotonic)

    async def register(self, namespace: str, spec: RunnerGroupSpec, runner: str) -> str:
        """Register `runner` for a group of `namespace` with its Gitea: the runner's `.runner` file."""
        ref = spec.registration_token.secret_ref
        where = (namespace, ref.name, ref.key)
        token = await self._token(where)
        labels = effective_labels(spec.labels, spec.default_labels)
        try:
            done = await self.registrar.register(
                spec.gitea.url, token, name=runner, labels=[label_name(label) for label in labels]
            )
        except RegistrationRefused as exc:
            self._tokens.pop(where, None)  # perhaps rotated since: read it again next time
            secret = f"Secret {namespace}/{ref.name}, key {ref.key}"
            raise TransientError(f"{REGISTRATION_REFUSED}Gitea refused the registrationToken ({secret}): {exc}",
                                 refused=REFUSED) from None  # fmt: skip
        except GiteaError as exc:  # slow (a burst of registrations on one database) or down: this runner only
            raise TransientError(f"{REGISTRATION_REFUSED}Gitea did not register the runner, retried later: {exc}",
                                 refused=UNREGISTERED) from None  # fmt: skip
        return runner_file(id=done.id, uuid=done.uuid, name=done.name, token=done.token, address=spec.gitea.url,
                           labels=labels)  # fmt: skip

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

    async def _token(self, where: _Where) -> str:
        cached = self._tokens.get(where)
        if cached is not None and time.monotonic() - cached[1] < TOKEN_TTL_S:
            return cached[0]
        try:
            token = await self.kube.secret_value(*where)
        except PermanentError as exc:
            if PROTECTED_SECRET in str(exc):
                raise
            raise TransientError(f"{REGISTRATION_REFUSED}registrationToken: {exc}", refused=REFUSED) from None
        self._tokens[where] = (token, time.monotonic())
        return token
