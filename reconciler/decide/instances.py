"""Pure: which Gitea instance each RunnerGroup serves, and the groups of an instance with no keys of its own.

Job ids are numbered per Gitea instance, so the jobs of each have Redis keys of their own
(`webhook_scaler.store.keys`): the default instance's, and one set per instance the admin names
(`GRS_GITEA_INSTANCES`, the chart's `giteaInstances`). A group serves the named instance its
`gitea.url` is, else the default one. The default instance is one Gitea: the instance of its oldest
valid group (by creation, then namespace and name: every replica picks the same); a group of any
other unnamed instance is refused with a message saying what to do. A group being deleted is never
refused (its drain still talks to its Gitea). Instances are compared by scheme, host, port and path
(case-insensitive host, default ports spelt out): two URLs of one Gitea that differ (an internal
Service name and a public host) count as two. Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from reconciler.model.spec import RunnerGroupSpec
from webhook_scaler.gitea import instance_url as instance


class Group(Protocol):
    """What this module reads of a RunnerGroup (a `GroupObject` of the Kubernetes side)."""

    @property
    def namespace(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def created_ms(self) -> int: ...
    @property
    def deleting(self) -> bool: ...


G = TypeVar("G", bound=Group)
View = tuple[G, RunnerGroupSpec | None, str]  # a group, its valid spec or None, what is wrong


def instance_of(url: str, named: Mapping[str, str]) -> str:
    """Which of the `named` instances (name -> URL) `url` is; "" for the default one."""
    if not named:
        return ""
    key = instance(url)
    return next((name for name, other in named.items() if instance(other) == key), "")


def one_instance(views: Sequence[View[G]], named: Mapping[str, str] | None = None) -> list[View[G]]:
    """`views` with each valid group of a second unnamed Gitea instance turned invalid, and why."""
    named = named or {}
    valid = [(g, s) for g, s, _ in views if s is not None and not instance_of(s.gitea.url, named)]
    if not valid:
        return list(views)
    first, spec = min(valid, key=lambda v: (v[0].created_ms, v[0].namespace, v[0].name))
    served = instance(spec.gitea.url)
    out: list[View[G]] = []
    for group, own, problem in views:
        unnamed = own is not None and not instance_of(own.gitea.url, named)
        if unnamed and own is not None and not group.deleting and instance(own.gitea.url) != served:
            out.append((group, None, _second(own.gitea.url, spec.gitea.url, first)))
        else:
            out.append((group, own, problem))
    return out


def _second(url: str, served: str, first: Group) -> str:
    return (
        f"spec.gitea.url {url} is a second Gitea instance: this install serves {served} (RunnerGroup "
        f"{first.namespace}/{first.name}, the oldest) as its default instance, and job ids of two instances "
        "collide. Name the other instance in the chart's giteaInstances (GRS_GITEA_INSTANCES, name=URL) and "
        "give its webhooks secret lines `[name] SECRET`; a Gitea reached by two URLs must be named by one"
    )
