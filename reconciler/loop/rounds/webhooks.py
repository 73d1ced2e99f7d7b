"""The `workflow_job` webhooks the controller installs in Gitea (`GRS_WEBHOOK_MANAGE`, off by default).

Owns: for each scope (Gitea URL, kind, target) of the groups whose API token proved it administers it
(`ScopeProven=True`, `proofs`), one active webhook delivering to `GRS_WEBHOOK_URL`, signed with that
scope's own secret (`webhook_scaler.hook_keys`): created when missing, set once per process (a new
`GRS_WEBHOOK_KEY` is a new secret), extras deleted (two replicas may each have made one: the oldest
stays); deleted when the scope's last group goes or changes scope (with the API token last read).
Each group's `WebhookInstalled` condition. Every `GRS_POLL_INTERVAL`, and at once when a proof changed.
Tokens and secrets stay in memory: never logged, in an error or in a status. Must not touch Redis or
Kubernetes.

Not kept across restarts: a group deleted while no controller runs leaves its scope's webhook in Gitea
(it delivers to the receiver, which finds no group for its jobs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from reconciler.decide.instances import View, instance_of
from reconciler.decide.status import Condition
from reconciler.gitea import hooks
from reconciler.gitea.api import GiteaClient, GiteaError, PollScope
from reconciler.kube.objects import GroupObject
from reconciler.loop.rounds.proofs import Ownership
from reconciler.loop.state import GroupState
from reconciler.settings import Settings
from webhook_scaler import hook_keys

log = logging.getLogger(__name__)
Target = tuple[str, str, str]  # (Gitea URL, scope kind, target lower-case): one webhook
KINDS: dict[str, hook_keys.Kind] = {"global": "instance", "org": "owner", "user": "owner", "repo": "repo"}
TYPE = "WebhookInstalled"


def target_of(scope: PollScope) -> Target:
    """The webhook a scope has: one per Gitea URL, kind and target."""
    return scope.url.rstrip("/"), scope.kind, scope.target.lower()


class Webhooks:
    """The managed webhooks of one controller."""

    def __init__(
        self,
        settings: Settings,
        *,
        gitea: GiteaClient,
        ownership: Ownership,
        views: Callable[[], Iterable[View[GroupObject]]],
        state_of: Callable[[GroupObject], GroupState],
        wake: Callable[[], None],
    ) -> None:
        self.settings, self.gitea, self.ownership = settings, gitea, ownership
        self.views, self.state_of, self.wake = views, state_of, wake
        self.installed: dict[Target, PollScope] = {}  # the webhooks this process set, with the token it used
        self.outcome: dict[Target, Condition] = {}

    async def manage_forever(self) -> None:
        """`manage_once` every `GRS_POLL_INTERVAL`, and at once when a proof changed."""
        while True:
            self.ownership.proved.clear()
            try:
                await self.manage_once()
            except Exception:  # one bad cycle never stops the webhooks for good
                log.exception("managing the webhooks failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ownership.proved.wait(), self.settings.poll_interval)

    async def manage_once(self) -> None:
        """Install the webhook of every proven group's scope; delete those no group has any more."""
        views = list(self.views())
        proven = self.ownership.proven(views)
        wanted: dict[Target, tuple[PollScope, list[GroupObject]]] = {}
        for group, _, _ in views:
            scope = proven.get((group.namespace, group.name))
            if scope is None:
                self._report(self.state_of(group), None)
            else:
                wanted.setdefault(target_of(scope), (scope, []))[1].append(group)
        for target, (scope, groups) in wanted.items():
            try:
                condition = await self._ensure(target, scope)
            except Exception:  # one scope's answers never stop the webhooks of the others
                log.exception("managing a webhook failed", extra={"scope": repr(scope)})
                continue
            for group in groups:
                self._report(self.state_of(group), condition)
        for target in [t for t in self.installed if t not in wanted]:
            await self._remove(target, self.installed[target])

    def _report(self, state: GroupState, condition: Condition | None) -> None:
        if state.webhook != condition:
            state.webhook = condition
            self.wake()

    async def _ensure(self, target: Target, scope: PollScope) -> Condition:
        url = self.settings.webhook_url
        try:
            found = await hooks.delivering_to(self.gitea, scope, url)
            if not found:
                await hooks.create(self.gitea, scope, url=url, secret=self._secret(scope))
                log.info("webhook installed", extra={"scope": repr(scope)})
            elif target not in self.installed or not found[0].active or hooks.EVENTS[0] not in found[0].events:
                await hooks.edit(self.gitea, scope, found[0].id, url=url, secret=self._secret(scope))
            for extra in found[1:]:
                await hooks.delete(self.gitea, scope, extra.id)
        except GiteaError as exc:
            return self._failed(target, scope, exc)
        self.installed[target] = scope
        delivers = f"Gitea delivers this scope's workflow_job events to {url}"
        self.outcome[target] = Condition(TYPE, "True", "Installed", delivers)
        return self.outcome[target]

    def _failed(self, target: Target, scope: PollScope, exc: GiteaError) -> Condition:
        refused = exc.status in (401, 403, 404)
        why = f"Gitea {'refused' if refused else 'did not answer'} the webhook's install: {exc}"
        before = self.outcome.get(target)
        if before is None or before.message != why:
            log.warning("webhook not installed", extra={"scope": repr(scope), "error": str(exc), "status": exc.status})
        self.outcome[target] = Condition(TYPE, "False", "WebhookRefused" if refused else "GiteaUnavailable", why)
        return self.outcome[target]

    async def _remove(self, target: Target, scope: PollScope) -> None:
        """Delete the scope's webhook; a token Gitea refuses (or a scope gone) gives up, anything else is
        tried again next cycle."""
        try:
            for hook in await hooks.delivering_to(self.gitea, scope, self.settings.webhook_url):
                await hooks.delete(self.gitea, scope, hook.id)
        except GiteaError as exc:
            extra = {"scope": repr(scope), "error": str(exc), "status": exc.status}
            if exc.status not in (401, 403, 404):
                log.warning("webhook not deleted yet", extra=extra)
                return
            log.warning("webhook left in Gitea: the token last read may not delete it", extra=extra)
        else:
            log.info("webhook deleted: its scope's last group went", extra={"scope": repr(scope)})
        del self.installed[target]
        self.outcome.pop(target, None)

    def _secret(self, scope: PollScope) -> str:
        key = self.settings.webhook_key.get_secret_value() if self.settings.webhook_key else ""
        instance = instance_of(scope.url, self.settings.instances)
        return hook_keys.secret(
            key.strip().encode("utf-8"), instance=instance, kind=KINDS[scope.kind], target=scope.target
        )
