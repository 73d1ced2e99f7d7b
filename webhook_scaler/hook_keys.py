"""The secrets of the webhooks the reconciler installs in Gitea (`GRS_WEBHOOK_MANAGE`): one per owner,
repository or instance, each derived from one key both processes hold (`GRS_WEBHOOK_KEY`).

A managed webhook's secret is HMAC-SHA256(key, "gitea-runner-scaler webhook secret v1", the instance's
name, the scope's kind, its target), in hex. Whoever can read one webhook's settings in Gitea (an org
owner, a repository admin) learns that webhook's secret only: it signs deliveries about their own
repositories, never another owner's (the receiver binds what it may speak for, as it binds a secret line
`@owner SECRET`). Nothing is stored: the reconciler derives a secret when it installs a webhook, the
receiver when a delivery's signature matched none of its secret lines. A new key is a new secret for
every managed webhook; the reconciler sets them again when it starts.

Owns: the derivation, and the keys a delivery may have been signed with. Must not do I/O or log.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ValidationError

from webhook_scaler.delivery import SigningKey

Kind = Literal["instance", "owner", "repo"]
_CONTEXT = "gitea-runner-scaler webhook secret v1"


def secret(key: bytes, *, instance: str, kind: Kind, target: str = "") -> str:
    """The secret of the managed webhook of one scope: a Gitea instance's ("": the default one) system
    webhook (`instance`), an org's or user's (`owner`), or a repository's (`repo`, `owner/name`)."""
    message = "\n".join((_CONTEXT, instance, kind, target.lower()))
    return hmac.new(key, message.encode("utf-8"), hashlib.sha256).hexdigest()


class _Repository(BaseModel):
    full_name: str


class _About(BaseModel):
    repository: _Repository


@dataclass(frozen=True, slots=True)
class Deriver:
    """The keys a delivery's own repository says it may have been signed with, for each instance."""

    key: bytes = field(repr=False)
    instances: tuple[str, ...] = ("",)  # "" and the names of GRS_GITEA_INSTANCES

    def keys(self, payload: bytes) -> list[SigningKey]:
        """For each instance: its system webhook's secret (any owner), the owner's and the repository's
        (bound to them). None for a body that names no repository: nothing managed signed it."""
        try:
            full_name = _About.model_validate_json(payload).repository.full_name.lower()
        except ValidationError:
            return []
        owner = full_name.split("/", 1)[0]
        return [key for instance in self.instances for key in self._of(instance, owner, full_name)]

    def _of(self, instance: str, owner: str, full_name: str) -> Iterable[SigningKey]:
        def one(kind: Kind, target: str) -> bytes:
            return secret(self.key, instance=instance, kind=kind, target=target).encode("ascii")

        yield SigningKey(one("instance", ""), instance=instance)
        yield SigningKey(one("owner", owner), frozenset({owner}), instance)
        yield SigningKey(one("repo", full_name), frozenset({owner}), instance, repo=full_name)
