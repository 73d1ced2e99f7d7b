"""The reconciler's caches of API objects: list + watch informers that relist on 410 Gone or any error.

Owns: `Informer` (one list and watch, kept in a dict by namespace and name), `Informers` (one cache
over one informer per namespace) and `caches()`, the caches of RunnerGroups, runner Jobs and their
Pods that the controller reads. Wakes its caller on every change; must not decide anything.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from reconciler.kube.api import REQUEST_TIMEOUT, Kube
from reconciler.kube.crd import GROUP, PLURAL, VERSION
from reconciler.kube.manifests import SELECTOR
from reconciler.kube.objects import GroupObject, JobObject, PodObject, group_from, job_from, pod_from
from reconciler.tasks import run_together

log = logging.getLogger(__name__)
T = TypeVar("T")


class Informer(Generic[T]):
    """A cache of one kind of object, kept by list + watch, relisting on 410 Gone or any error."""

    def __init__(
        self,
        name: str,
        *,
        list_fn: Callable[..., Awaitable[Any]],
        convert: Callable[[Mapping[str, Any]], T],
        sanitize: Callable[[Any], Any],
        on_change: Callable[[], None],
        backoff: tuple[float, float] = (0.5, 30.0),
        watch_timeout: int = 300,
    ) -> None:
        self.name = name
        self.items: dict[tuple[str, str], T] = {}
        self.synced = asyncio.Event()
        self.relists = 0
        self._list = list_fn
        self._convert = convert
        self._sanitize = sanitize
        self._on_change = on_change
        self._backoff = backoff
        self._watch_timeout = watch_timeout

    @staticmethod
    def _key(raw: Mapping[str, Any]) -> tuple[str, str]:
        meta = raw["metadata"]
        return meta.get("namespace", ""), meta["name"]

    def _converted(self, raw: Mapping[str, Any]) -> T | None:
        """The object as the cache keeps it, or None (left out, and logged) if it cannot be read: one
        object anyone may edit (an annotation, say) never stops the cache of every other."""
        try:
            return self._convert(raw)
        except Exception as exc:
            namespace, name = self._key(raw)
            extra = {"informer": self.name, "namespace": namespace, "object": name, "error": repr(exc)[:300]}
            log.warning("object left out of the cache: it cannot be read", extra=extra)
            return None

    async def _relist(self) -> str:
        result = self._sanitize(await self._list(_request_timeout=REQUEST_TIMEOUT * 2))
        converted = ((self._key(o), self._converted(o)) for o in result.get("items") or [])
        self.items = {key: obj for key, obj in converted if obj is not None}
        self.relists += 1
        self.synced.set()
        self._on_change()
        return str(result["metadata"]["resourceVersion"])

    async def run(self) -> None:
        """List, then watch from the list's resourceVersion, forever."""
        delay = self._backoff[0]
        while True:
            try:
                version = await self._relist()
                delay = self._backoff[0]
                while True:
                    version = await self._watch(version)
            except asyncio.CancelledError:
                raise
            except ApiException as exc:
                if exc.status == 410:
                    log.info("watch expired, relisting", extra={"informer": self.name})
                    continue
                log.warning("watch failed", extra={"informer": self.name, "status": exc.status})
            except Exception as exc:
                log.warning("watch failed", extra={"informer": self.name, "error": type(exc).__name__})
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, self._backoff[1])

    async def _watch(self, version: str) -> str:
        w = watch.Watch()
        async with w.stream(
            self._list,
            resource_version=version,
            timeout_seconds=self._watch_timeout,
            allow_watch_bookmarks=True,
        ) as stream:
            async for event in stream:
                raw = event["raw_object"]
                kind = event["type"]
                if kind == "BOOKMARK":
                    version = raw["metadata"]["resourceVersion"]
                    continue
                key = self._key(raw)
                obj = None if kind == "DELETED" else self._converted(raw)
                if obj is None:
                    self.items.pop(key, None)
                else:
                    self.items[key] = obj
                version = raw["metadata"]["resourceVersion"]
                self._on_change()
        return version


class Informers(Generic[T]):
    """One cache over several informers (one per namespace), read like one Informer."""

    def __init__(self, name: str, parts: Sequence[Informer[T]]) -> None:
        self.name = name
        self.parts = list(parts)
        self.synced = asyncio.Event()

    @property
    def items(self) -> dict[tuple[str, str], T]:
        """Every part's objects (the keys carry the namespace, so they never collide)."""
        return {key: obj for part in self.parts for key, obj in part.items.items()}

    @property
    def relists(self) -> int:
        """Relists of all parts."""
        return sum(p.relists for p in self.parts)

    async def run(self) -> None:
        """Run every part; synced once all are."""

        async def synced() -> None:
            for part in self.parts:
                await part.synced.wait()
            self.synced.set()
            await asyncio.Future()  # parts run until cancelled, and so does this

        tasks = [asyncio.create_task(p.run(), name=f"informer-{p.name}") for p in self.parts]
        tasks.append(asyncio.create_task(synced(), name=f"synced-{self.name}"))
        await run_together(tasks, what="informer")


Cache = Informer[T] | Informers[T]


def caches(kube: Kube, on_change: Callable[[], None]) -> tuple[Cache[GroupObject], Cache[JobObject], Cache[PodObject]]:
    """Caches of RunnerGroups, runner Jobs and their Pods: one list and watch of each in every namespace
    `kube` serves (a namespaced Role in each is all it needs), or one across all namespaces."""
    sanitize = kube.api.sanitize_for_serialization

    def groups(ns: str) -> Callable[..., Awaitable[Any]]:
        if ns:
            return partial(kube.custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL)
        return partial(kube.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)

    def jobs(ns: str) -> Callable[..., Awaitable[Any]]:
        if ns:
            return partial(kube.batch.list_namespaced_job, ns, label_selector=SELECTOR)
        return partial(kube.batch.list_job_for_all_namespaces, label_selector=SELECTOR)

    def pods(ns: str) -> Callable[..., Awaitable[Any]]:
        if ns:
            return partial(kube.core.list_namespaced_pod, ns, label_selector=SELECTOR)
        return partial(kube.core.list_pod_for_all_namespaces, label_selector=SELECTOR)

    def cache(name: str, lister: Callable[[str], Callable[..., Awaitable[Any]]], convert: Any) -> Cache[Any]:
        parts = [
            Informer(
                f"{name}/{ns}" if ns else name,
                list_fn=lister(ns),
                convert=convert,
                sanitize=sanitize,
                on_change=on_change,
            )
            for ns in kube.namespaces or ("",)
        ]
        return parts[0] if len(parts) == 1 else Informers(name, parts)

    return cache("runnergroups", groups, group_from), cache("jobs", jobs, job_from), cache("pods", pods, pod_from)
