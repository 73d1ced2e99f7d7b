"""The only module that talks to Kubernetes: kubernetes_asyncio calls, converted to our dataclasses.

Owns: client configuration, list+watch informers that relist on 410 Gone, Job create/delete, status
patches, Events and Secret reads, and the classification of API errors into transient (retry with
backoff) and permanent (report, stop retrying). Must not decide anything about scaling.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, Generic, TypeVar, cast

import aiohttp
from kubernetes_asyncio import client, config, watch
from kubernetes_asyncio.client.exceptions import ApiException

from reconciler.crd import GROUP, PLURAL, VERSION
from reconciler.manifests import (
    GROUP_LABEL,
    JOB_ID_ANNOTATION,
    REGISTER_CONTAINER,
    RUNNER_CONTAINER,
    SELECTOR,
    GroupRef,
)
from reconciler.status import SEAT_EPOCH
from reconciler.tasks import run_together

log = logging.getLogger(__name__)
T = TypeVar("T")
COMPONENT = "gitea-runner-scaler"
REQUEST_TIMEOUT = 30.0  # seconds; no API call may wait for ever (watches end by their own timeout)


class TransientError(Exception):
    """Worth retrying with backoff: throttling, server errors, timeouts, conflicts, quota."""


class PermanentError(Exception):
    """Retrying will not help until something changes: report it and stop."""


def classify(exc: BaseException) -> Exception:
    """The transient or permanent error an API failure stands for."""
    if isinstance(exc, ApiException):
        body = str(exc.body or "")
        if exc.status in (409, 429) or (exc.status or 0) >= 500:
            return TransientError(f"HTTP {exc.status} {exc.reason}")
        if exc.status == 403 and "exceeded quota" in body:
            return TransientError("ResourceQuota exceeded; retrying later")
        return PermanentError(f"HTTP {exc.status} {exc.reason}: {_message(body)}")
    if isinstance(exc, asyncio.TimeoutError | OSError | aiohttp.ClientError):
        return TransientError(type(exc).__name__)
    return PermanentError(f"{type(exc).__name__}: {exc}")


def _message(body: str) -> str:
    try:
        return str(json.loads(body).get("message", ""))[:300]
    except (ValueError, AttributeError):
        return body[:300]


def _ms(timestamp: str | datetime | None) -> int | None:
    if timestamp is None:
        return None
    if isinstance(timestamp, str):
        timestamp = datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    return int(timestamp.timestamp() * 1000)


# -- our views of API objects -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupObject:
    """A RunnerGroup as read from the API."""

    namespace: str
    name: str
    uid: str
    generation: int
    spec: Mapping[str, Any]
    status: Mapping[str, Any]
    annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> GroupRef:
        """Its identity, for owner references and Events."""
        return GroupRef(namespace=self.namespace, name=self.name, uid=self.uid)


@dataclass(frozen=True, slots=True)
class JobObject:
    """A runner Job."""

    namespace: str
    name: str
    group: str
    job_id: int | None
    created_ms: int
    finished: str  # "" while running, "Complete" or "Failed"
    reason: str  # why it failed
    finished_ms: int = 0  # when it finished (0 while running)


@dataclass(frozen=True, slots=True)
class PodObject:
    """A Pod of a runner Job."""

    namespace: str
    name: str
    job_name: str
    phase: str
    created_ms: int
    running_since_ms: int | None
    failure: str = ""  # for a failed Pod: the register or runner container's exit code and termination message


def group_from(raw: Mapping[str, Any]) -> GroupObject:
    """Convert a RunnerGroup object."""
    meta = raw["metadata"]
    return GroupObject(
        namespace=meta["namespace"],
        name=meta["name"],
        uid=meta["uid"],
        generation=int(meta.get("generation") or 0),
        spec=raw.get("spec") or {},
        status=raw.get("status") or {},
        annotations=meta.get("annotations") or {},
    )


def job_from(raw: Mapping[str, Any]) -> JobObject:
    """Convert a batch/v1 Job."""
    meta = raw["metadata"]
    finished, reason, finished_ms = "", "", 0
    for cond in (raw.get("status") or {}).get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            finished = cond["type"]
            reason = cond.get("reason") or cond.get("message") or ""
            finished_ms = _ms(cond.get("lastTransitionTime")) or 0
    job_id = (meta.get("annotations") or {}).get(JOB_ID_ANNOTATION)
    return JobObject(
        namespace=meta["namespace"],
        name=meta["name"],
        group=(meta.get("labels") or {}).get(GROUP_LABEL, ""),
        job_id=int(job_id) if job_id and job_id.isdigit() else None,
        created_ms=_ms(meta.get("creationTimestamp")) or 0,
        finished=finished,
        reason=reason,
        finished_ms=finished_ms,
    )


def pod_from(raw: Mapping[str, Any]) -> PodObject:
    """Convert a Pod."""
    meta, status = raw["metadata"], raw.get("status") or {}
    labels = meta.get("labels") or {}
    running: int | None = None
    failure = ""
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        started = (state.get("running") or {}).get("startedAt")
        if started:
            running = _ms(started)
        ended = state.get("terminated") or {}
        if cs.get("name") == RUNNER_CONTAINER and ended.get("exitCode"):
            failure = _failure(ended)
    for cs in status.get("initContainerStatuses") or []:  # registration failed: the runner never started
        ended = (cs.get("state") or {}).get("terminated") or {}
        if cs.get("name") == REGISTER_CONTAINER and ended.get("exitCode"):
            failure = _failure(ended)
    return PodObject(
        namespace=meta["namespace"],
        name=meta["name"],
        job_name=labels.get("batch.kubernetes.io/job-name") or labels.get("job-name", ""),
        phase=status.get("phase") or "Pending",
        created_ms=_ms(meta.get("creationTimestamp")) or 0,
        running_since_ms=running if status.get("phase") == "Running" else None,
        failure=failure,
    )


def _failure(terminated: Mapping[str, Any]) -> str:
    """A failed runner container, in one line: its exit code and the last line of its message."""
    lines = [line.strip() for line in str(terminated.get("message") or "").splitlines() if line.strip()]
    said = f": {lines[-1][:300]}" if lines else f" ({terminated.get('reason') or 'Error'})"
    return f"exit code {terminated.get('exitCode')}{said}"


# -- informers ------------------------------------------------------------------------------------


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

    async def _relist(self) -> str:
        result = self._sanitize(await self._list(_request_timeout=REQUEST_TIMEOUT * 2))
        self.items = {self._key(o): self._convert(o) for o in result.get("items") or []}
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
                if kind == "DELETED":
                    self.items.pop(key, None)
                else:
                    self.items[key] = self._convert(raw)
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


# -- the client -----------------------------------------------------------------------------------


async def api_client(kubeconfig: str | None) -> client.ApiClient:
    """An API client from a kubeconfig file, or the in-cluster service account."""
    if kubeconfig:
        await config.load_kube_config(config_file=kubeconfig)
    else:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    return client.ApiClient()


class Kube:
    """Typed operations over the API objects the reconciler owns or reads."""

    def __init__(self, api: client.ApiClient, *, namespaces: Sequence[str] = ()) -> None:
        self.api = api
        self.namespaces = tuple(namespaces)  # those the informers watch; () for all
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)

    def informers(self, on_change: Callable[[], None]) -> tuple[Cache[GroupObject], Cache[JobObject], Cache[PodObject]]:
        """Caches of RunnerGroups, runner Jobs and their Pods: one list and watch of each in every served
        namespace (a namespaced Role in each is all it needs), or one across all namespaces."""
        sanitize = self.api.sanitize_for_serialization

        def groups(ns: str) -> Callable[..., Awaitable[Any]]:
            if ns:
                return partial(self.custom.list_namespaced_custom_object, GROUP, VERSION, ns, PLURAL)
            return partial(self.custom.list_cluster_custom_object, GROUP, VERSION, PLURAL)

        def jobs(ns: str) -> Callable[..., Awaitable[Any]]:
            if ns:
                return partial(self.batch.list_namespaced_job, ns, label_selector=SELECTOR)
            return partial(self.batch.list_job_for_all_namespaces, label_selector=SELECTOR)

        def pods(ns: str) -> Callable[..., Awaitable[Any]]:
            if ns:
                return partial(self.core.list_namespaced_pod, ns, label_selector=SELECTOR)
            return partial(self.core.list_pod_for_all_namespaces, label_selector=SELECTOR)

        def cache(name: str, lister: Callable[[str], Callable[..., Awaitable[Any]]], convert: Any) -> Cache[Any]:
            parts = [
                Informer(
                    f"{name}/{ns}" if ns else name,
                    list_fn=lister(ns),
                    convert=convert,
                    sanitize=sanitize,
                    on_change=on_change,
                )
                for ns in self.namespaces or ("",)
            ]
            return parts[0] if len(parts) == 1 else Informers(name, parts)

        return cache("runnergroups", groups, group_from), cache("jobs", jobs, job_from), cache("pods", pods, pod_from)

    async def create_job(self, body: Mapping[str, Any]) -> bool:
        """Create a Job; False if one of that name exists already (409 is success)."""
        try:
            await self.batch.create_namespaced_job(
                body["metadata"]["namespace"], cast(Any, body), _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status == 409 and "AlreadyExists" in str(exc.body or ""):
                return False
            raise classify(exc) from None
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            raise classify(exc) from None
        return True

    async def job_exists(self, namespace: str, name: str) -> bool:
        """Whether the API server (not the cache) has a Job of that name."""
        try:
            await self.batch.read_namespaced_job(name, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise classify(exc) from None
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            raise classify(exc) from None
        return True

    async def seat_epoch(self, group: GroupRef) -> str | None:
        """The seat epoch the API server (not the cache) records in the group's status."""
        try:
            raw = await self.custom.get_namespaced_custom_object_status(
                GROUP, VERSION, group.namespace, PLURAL, group.name, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            raise classify(exc) from None
        except (TimeoutError, OSError, aiohttp.ClientError) as exc:
            raise classify(exc) from None
        return cast("str | None", (raw.get("status") or {}).get(SEAT_EPOCH))

    async def delete_job(self, namespace: str, name: str) -> None:
        """Delete a Job and its Pods; 404 is success."""
        try:
            await self.batch.delete_namespaced_job(
                name, namespace, propagation_policy="Background", _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 404:
                raise classify(exc) from None

    async def patch_status(self, group: GroupRef, status: Mapping[str, Any]) -> None:
        """Merge-patch a RunnerGroup's status subresource."""
        try:
            await self.custom.patch_namespaced_custom_object_status(
                GROUP,
                VERSION,
                group.namespace,
                PLURAL,
                group.name,
                {"status": dict(status)},
                _content_type="application/merge-patch+json",  # type: ignore[call-arg]
                _request_timeout=REQUEST_TIMEOUT,
            )
        except ApiException as exc:
            if exc.status != 404:
                raise classify(exc) from None

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        """One key of a Secret, decoded; PermanentError names the Secret and key, never the value."""
        try:
            secret = await self.core.read_namespaced_secret(name, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                raise PermanentError(f"Secret {namespace}/{name} not found") from None
            raise classify(exc) from None
        data = secret.data or {}
        if key not in data:
            raise PermanentError(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode("utf-8").strip()

    async def ensure_secret_key(self, namespace: str, name: str, key: str, make: Callable[[], str]) -> bool:
        """Give Secret `name` the key `key` (value `make()`) unless it has one; True if it wrote.

        Creates the Secret if it is missing; an existing value is never replaced, so this is safe to run on
        every install and upgrade. Values never appear in errors.
        """
        try:
            secret = await self.core.read_namespaced_secret(name, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise classify(exc) from None
            secret = None
        if secret is not None and key in (secret.data or {}):
            return False
        value = base64.b64encode(make().encode()).decode()
        try:
            if secret is None:
                body = {
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "labels": {"app.kubernetes.io/created-by": COMPONENT},
                    },
                    "type": "Opaque",
                    "data": {key: value},
                }
                await self.core.create_namespaced_secret(namespace, cast(Any, body), _request_timeout=REQUEST_TIMEOUT)
            else:  # the resourceVersion makes a concurrent writer fail with 409 instead of being overwritten
                patch = {"metadata": {"resourceVersion": secret.metadata.resource_version}, "data": {key: value}}
                await self.core.patch_namespaced_secret(
                    name, namespace, cast(Any, patch), _request_timeout=REQUEST_TIMEOUT
                )
        except ApiException as exc:
            raise classify(exc) from None
        return True

    async def event(self, group: GroupRef, *, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on a RunnerGroup; failures are logged, never raised."""
        now = datetime.now(UTC)
        body = {
            "metadata": {"name": f"{group.name}.{uuid.uuid4().hex[:16]}", "namespace": group.namespace},
            "involvedObject": {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "RunnerGroup",
                "name": group.name,
                "namespace": group.namespace,
                "uid": group.uid,
            },
            "type": kind,
            "reason": reason,
            "message": message[:1000],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "firstTimestamp": now.isoformat(),
            "lastTimestamp": now.isoformat(),
            "count": 1,
        }
        try:
            await self.core.create_namespaced_event(group.namespace, cast(Any, body), _request_timeout=REQUEST_TIMEOUT)
        except (TimeoutError, ApiException, OSError) as exc:
            log.warning("event not recorded", extra={"group": group.name, "reason": reason, "error": str(exc)[:200]})
