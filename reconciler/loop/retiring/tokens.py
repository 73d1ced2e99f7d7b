"""The API token of each group, kept at hand for its drain: a token Secret deleted with its group (GitOps
deletes both) can no longer be read when the drain needs it.

Owns: reading a group's (Gitea, scope, API token) for the runner rows protocol (`vetting`) and the
drain (`ghosts.clear`), remembering the token last read for each group while it is served (read
again at most every `REMEMBER_S`), using it only while that group is being deleted and its Secret cannot
be read any more, and forgetting it once the group is gone. The token stays in memory: never logged,
never in an error or a status. Must not call Gitea; Kubernetes only through `Kube.secret_value`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from reconciler.gitea.api import PollScope
from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.kube.objects import GroupObject
from reconciler.loop.scopes import scope_of
from reconciler.model.spec import RunnerGroupSpec

log = logging.getLogger(__name__)
REMEMBER_S = 300.0  # seconds between reads of a served group's token kept for its drain


@dataclass
class Tokens:
    """The groups' API tokens as last read, by (group uid, where its runners register)."""

    kube: Kube
    clock: Callable[[], float] = time.monotonic
    read: dict[tuple[str, str], PollScope] = field(default_factory=dict)
    tried: dict[tuple[str, str], float] = field(default_factory=dict)  # when `remember` last read it

    async def scope(self, group: GroupObject, spec: RunnerGroupSpec) -> PollScope:
        """The group's (Gitea, scope, API token) as `spec` says; for a group being deleted whose token
        cannot be read any more (PermanentError: its Secret or key is gone), the one last read for it.
        Raises what `scope_of` raises otherwise."""
        key = (group.uid, spec.registered_at)
        try:
            scope = await scope_of(self.kube, spec, group.namespace)
        except PermanentError:
            kept = self.read.get(key)
            if not group.deleting or kept is None:
                raise
            log.info(
                "API token unreadable: the drain uses the one last read",
                extra={"group": group.name, "namespace": group.namespace},
            )
            return kept
        self.read[key] = scope
        return scope

    async def remember(self, group: GroupObject, spec: RunnerGroupSpec) -> None:
        """Read a served group's token if it was not read in the last REMEMBER_S seconds; a failure is
        left to the poll, which reports it on the group."""
        key, now = (group.uid, spec.registered_at), self.clock()
        if now < self.tried.get(key, now - REMEMBER_S) + REMEMBER_S:
            return
        self.tried[key] = now
        try:
            await self.scope(group, spec)
        except (PermanentError, TransientError) as exc:
            log.debug("API token not read", extra={"group": group.name, "error": str(exc)})

    def forget(self, uid: str) -> None:
        """Drop the tokens of a group that is gone."""
        for key in [k for k in self.read.keys() | self.tried.keys() if k[0] == uid]:
            self.read.pop(key, None)
            self.tried.pop(key, None)
