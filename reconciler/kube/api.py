"""The reconciler's typed calls to Kubernetes: kubernetes_asyncio requests, their errors classified.

Owns: client configuration, Job create/delete, status patches, Events and Secret reads and writes,
and the classification of API errors into transient (retry with backoff) and permanent (report, stop
retrying). The watch caches live in `informers`, our views of the API objects in `objects`. Must not
decide anything about scaling.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.client.rest import RESTResponse

from reconciler.decide.status import SEAT_EPOCH
from reconciler.kube.crd import GROUP, PLURAL, VERSION
from reconciler.kube.events import COMPONENT, FAILED_CREATE_SELECTOR, PROTECTED_SECRET, event_body, refusals
from reconciler.kube.manifests import GroupRef

log = logging.getLogger(__name__)
CREATED_BY = "app.kubernetes.io/created-by"  # on the Secrets we make (with COMPONENT)
REQUEST_TIMEOUT = 30.0  # seconds; no API call may wait for ever (watches end by their own timeout)
_WRITE: dict[str, Any] = {"_request_timeout": REQUEST_TIMEOUT, "_preload_content": False}  # see `_answered`


class TransientError(Exception):
    """Worth retrying with backoff: throttling, server errors, timeouts, conflicts, quota. `refused`
    names why the API server turned the request down, when it surely did nothing (throttled, quota);
    empty when it may have been carried out (a timeout, a server error)."""

    def __init__(self, message: str, *, refused: str = "") -> None:
        super().__init__(message)
        self.refused = refused


class PermanentError(Exception):
    """Retrying will not help until something changes: report it and stop."""


def classify(exc: BaseException) -> Exception:
    """The transient or permanent error an API failure stands for."""
    if isinstance(exc, ApiException):
        body = str(exc.body or "")
        if exc.status == 429:
            return TransientError(f"HTTP {exc.status} {exc.reason}", refused="throttled")
        if exc.status == 409 or (exc.status or 0) >= 500:
            return TransientError(f"HTTP {exc.status} {exc.reason}")
        if exc.status == 403 and "exceeded quota" in body:
            return TransientError(f"ResourceQuota exceeded; retrying later: {_message(body)}", refused="quota")
        return PermanentError(f"HTTP {exc.status} {exc.reason}: {_message(body)}")
    if isinstance(exc, asyncio.TimeoutError | OSError | aiohttp.ClientError):
        return TransientError(type(exc).__name__)
    return PermanentError(f"{type(exc).__name__}: {exc}")


def _message(body: str) -> str:
    try:
        return str(json.loads(body).get("message", ""))[:300]
    except (ValueError, AttributeError):
        return body[:300]


async def api_client(kubeconfig: str | None) -> client.ApiClient:
    """An API client from a kubeconfig file, the in-cluster service account, or out of a cluster (no
    KUBERNETES_SERVICE_HOST) $KUBECONFIG or ~/.kube/config."""
    if kubeconfig or not os.environ.get("KUBERNETES_SERVICE_HOST"):
        await config.load_kube_config(config_file=kubeconfig or os.environ.get("KUBECONFIG"))
    else:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    api = client.ApiClient()
    if not any(os.environ.get(v) or os.environ.get(v.upper()) for v in _PROXY_VARIABLES):
        # kubernetes_asyncio's session trusts the environment: every request then reads ~/.netrc and the
        # proxy variables in a thread, a fifth of the reconciler's CPU in a burst. Without a proxy
        # variable there is nothing to find (the API server never takes netrc credentials).
        api.rest_client.pool_manager._trust_env = False
    return api


_PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


async def _answered(call: Awaitable[Any]) -> bytes:
    """Await a write sent with `_preload_content=False`: the answer is read but not turned into a model
    (that took a tenth of a burst's CPU); a non-2xx raises ApiException as usual."""
    response: aiohttp.ClientResponse = await call
    async with response:
        data = await response.read()
        if not 200 <= response.status <= 299:
            refused = ApiException(http_resp=cast(Any, RESTResponse(response, data)))
            refused.body = cast(Any, data.decode("utf-8", "replace"))  # as the client leaves it
            raise refused
        return data


async def _created(call: Awaitable[Any]) -> str | None:
    """Send a create (its answer not turned into a model, see `_answered`): the new object's uid, or
    None if an object of that name exists already."""
    try:
        answer = await _answered(call)
    except ApiException as exc:
        if exc.status == 409 and "AlreadyExists" in str(exc.body or ""):
            return None
        raise classify(exc) from None
    except (TimeoutError, OSError, aiohttp.ClientError) as exc:
        raise classify(exc) from None
    return str(json.loads(answer)["metadata"]["uid"])


class Kube:
    """Typed operations over the API objects the reconciler owns or reads."""

    def __init__(
        self, api: client.ApiClient, *, namespaces: Sequence[str] = (), protected: Iterable[tuple[str, str]] = ()
    ) -> None:
        self.api = api
        self.protected = frozenset(protected)  # (namespace, name): the install's own Secrets
        self.namespaces = tuple(namespaces)  # those the informers watch; () for all
        self.custom = client.CustomObjectsApi(api)
        self.batch = client.BatchV1Api(api)
        self.core = client.CoreV1Api(api)
        self.policy = client.PolicyV1Api(api)
        self.extensions = client.ApiextensionsV1Api(api)  # the CRD hook's (see `crd_apply`)

    async def create_job(self, body: Mapping[str, Any]) -> str | None:
        """Create a Job: its uid, or None if one of that name exists already (409 is success)."""
        namespace = body["metadata"]["namespace"]
        return await _created(self.batch.create_namespaced_job(namespace, cast(Any, body), **_WRITE))

    async def create_secret(self, body: Mapping[str, Any]) -> str | None:
        """Create a Secret: its uid, or None if one of that name exists already."""
        return await _created(
            self.core.create_namespaced_secret(body["metadata"]["namespace"], cast(Any, body), **_WRITE)
        )

    async def create_budget(self, body: Mapping[str, Any]) -> str | None:
        """Create a PodDisruptionBudget: its uid, or None if one of that name exists already."""
        namespace = body["metadata"]["namespace"]
        return await _created(self.policy.create_namespaced_pod_disruption_budget(namespace, cast(Any, body), **_WRITE))

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

    async def refused_pods(self, namespace: str) -> dict[str, str]:
        """The runner Jobs (by uid) whose Pods the API server refused, with its latest message (the Job
        controller's `FailedCreate` Events)."""
        try:
            listed = await self.core.list_namespaced_event(
                namespace, field_selector=FAILED_CREATE_SELECTOR, _request_timeout=REQUEST_TIMEOUT
            )
        except (ApiException, TimeoutError, OSError, aiohttp.ClientError) as exc:
            raise classify(exc) from None
        return refusals(self.api.sanitize_for_serialization(e) for e in listed.items or [])

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

    async def patch_finalizers(self, group: GroupRef, ops: Sequence[Mapping[str, Any]]) -> None:
        """Apply a JSON patch to a RunnerGroup's finalizers (its `test` ops guard against a concurrent
        change: then a TransientError, and the next pass reads the group again; status writes do not
        conflict with it). A group gone already (404) needs none."""
        call = self.custom.patch_namespaced_custom_object
        await self._patch(call, group, list(ops), "application/json-patch+json", retry=(422,))

    async def patch_status(self, group: GroupRef, status: Mapping[str, Any]) -> None:
        """Merge-patch a RunnerGroup's status subresource."""
        body = {"status": dict(status)}
        await self._patch(
            self.custom.patch_namespaced_custom_object_status, group, body, "application/merge-patch+json"
        )

    @staticmethod
    async def _patch(
        call: Callable[..., Awaitable[Any]],
        group: GroupRef,
        body: Any,
        content_type: str,
        *,
        retry: tuple[int, ...] = (),
    ) -> None:
        """A patch of a RunnerGroup (or its status); one that is gone (404) needs none; `retry`: answers
        that are transient here."""
        try:
            await _answered(
                call(
                    GROUP,
                    VERSION,
                    group.namespace,
                    PLURAL,
                    group.name,
                    body,
                    _content_type=content_type,
                    _request_timeout=REQUEST_TIMEOUT,
                    _preload_content=False,
                )
            )
        except ApiException as exc:
            if exc.status in retry:
                raise TransientError(f"HTTP {exc.status} {exc.reason}") from None
            if exc.status != 404:
                raise classify(exc) from None

    async def secret_value(self, namespace: str, name: str, key: str) -> str:
        """One key of a Secret, decoded; PermanentError names the Secret and key, never the value. The
        install's own Secrets (`protected`, or made by us) are refused: a RunnerGroup that names one
        must not get it sent to a Gitea of its choosing."""
        try:
            secret = await self.core.read_namespaced_secret(name, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status == 404:
                raise PermanentError(f"Secret {namespace}/{name} not found") from None
            raise classify(exc) from None
        if (namespace, name) in self.protected or (secret.metadata.labels or {}).get(CREATED_BY) == COMPONENT:
            raise PermanentError(f"Secret {namespace}/{name} {PROTECTED_SECRET}")
        data = secret.data or {}
        if key not in data:
            raise PermanentError(f"Secret {namespace}/{name} has no key {key!r}")
        return base64.b64decode(data[key]).decode("utf-8").strip()

    async def ensure_secret_key(
        self, namespace: str, name: str, key: str, make: Callable[[], str], *, replace: bool = False
    ) -> bool:
        """Give Secret `name` the key `key` (value `make()`) unless it has one (`replace`: that value); True
        if it wrote. Creates the Secret if missing; without `replace` a value is never replaced, so this
        is safe on every install and upgrade. Values never appear in errors."""
        try:
            secret = await self.core.read_namespaced_secret(name, namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as exc:
            if exc.status != 404:
                raise classify(exc) from None
            secret = None
        current = (secret.data or {}).get(key) if secret is not None else None
        if current is not None and not replace:
            return False
        value = base64.b64encode(make().encode()).decode()
        if current == value:
            return False
        try:
            if secret is None:
                meta = {"name": name, "namespace": namespace, "labels": {CREATED_BY: COMPONENT}}
                body = {"metadata": meta, "type": "Opaque", "data": {key: value}}
                await self.core.create_namespaced_secret(namespace, cast(Any, body), _request_timeout=REQUEST_TIMEOUT)
            else:  # a concurrent writer fails with 409 (resourceVersion); our label marks it the install's own
                meta = {"resourceVersion": secret.metadata.resource_version, "labels": {CREATED_BY: COMPONENT}}
                patch = {"metadata": meta, "data": {key: value}}
                await self.core.patch_namespaced_secret(
                    name, namespace, cast(Any, patch), _request_timeout=REQUEST_TIMEOUT
                )
        except ApiException as exc:
            raise classify(exc) from None
        return True

    async def event(self, group: GroupRef, *, kind: str, reason: str, message: str) -> None:
        """Record a core/v1 Event on a RunnerGroup; failures are logged, never raised."""
        body = event_body(group, kind=kind, reason=reason, message=message, now=datetime.now(UTC))
        try:
            await _answered(
                self.core.create_namespaced_event(
                    group.namespace, cast(Any, body), _request_timeout=REQUEST_TIMEOUT, _preload_content=False
                )
            )
        except (TimeoutError, ApiException, OSError) as exc:
            log.warning("event not recorded", extra={"group": group.name, "reason": reason, "error": str(exc)[:200]})
