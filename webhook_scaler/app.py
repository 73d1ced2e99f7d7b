"""The receiver's aiohttp application: thin handlers over `delivery` (pure) and `store.jobs.records` (Redis).

Owns: routes, the body size limit, and the mapping of typed errors to HTTP statuses (401 signature,
403 owner, 400 payload or a job from the future, 409 another repository's job, 413 size, 503 Redis).
Must not parse or verify payloads itself, nor format Redis keys.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisClusterException, RedisError

from webhook_scaler import delivery
from webhook_scaler.gitea import JobStatus
from webhook_scaler.hook_keys import Deriver
from webhook_scaler.metrics import Metrics
from webhook_scaler.settings import Settings
from webhook_scaler.store.client import store_client
from webhook_scaler.store.jobs.model import JobUpdate
from webhook_scaler.store.jobs.records import JobStore, Outcome, RecordResult, Ttls

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", Settings)
STORE = web.AppKey("store", JobStore)
METRICS = web.AppKey("metrics", Metrics)
REGISTRY = web.AppKey("registry", CollectorRegistry)
STOPPING = web.AppKey("stopping", asyncio.Event)
CLOCK: web.AppKey[Callable[[], float]] = web.AppKey("clock")  # wall-clock seconds: how old a job is
KEYS: web.AppKey[tuple[delivery.SigningKey, ...]] = web.AppKey("keys")  # the secret lines, parsed once
DERIVER: web.AppKey[Deriver | None] = web.AppKey("deriver")  # the managed webhooks' secrets (`hook_keys`)

_REDIS_ERRORS = (RedisError, RedisClusterException, OSError, TimeoutError)


class _TooLarge(Exception):
    pass


def _json(code: int, **body: object) -> web.Response:
    return web.json_response(body, status=code)


async def _read_body(request: web.Request, limit: int) -> bytes:
    if request.content_length is not None and request.content_length > limit:
        raise _TooLarge
    body = bytearray()
    async for chunk in request.content.iter_chunked(64 * 1024):
        body += chunk
        if len(body) > limit:
            raise _TooLarge
    return bytes(body)


async def webhook(request: web.Request) -> web.Response:
    """Verify one delivery and record its job state in Redis before answering 2xx."""
    started = time.perf_counter()
    metrics = request.app[METRICS]
    event = "unknown"
    try:
        response, event, outcome = await _handle(request)
    except _TooLarge:
        response, outcome = _json(413, error="body too large"), "too_large"
    metrics.deliveries.labels(event=event, outcome=outcome).inc()
    metrics.request_seconds.observe(time.perf_counter() - started)
    return response


async def _handle(request: web.Request) -> tuple[web.Response, str, str]:
    settings, keys, now_s = request.app[SETTINGS], request.app[KEYS], request.app[CLOCK]()
    body = await _read_body(request, settings.max_body_bytes)
    try:
        deriver = request.app[DERIVER]
        derived = deriver.keys if deriver is not None else None
        parsed = delivery.parse(body, headers=request.headers, secrets=keys, derived=derived)
    except delivery.DeliveryError as exc:
        return _refused(request, exc), "unknown", exc.reason
    if parsed.payload is None:
        return _json(200, outcome="ignored", event=parsed.event), parsed.event, "ignored"
    try:
        delivery.not_from_future(parsed.payload, now_s=now_s, skew_s=settings.clock_skew)
    except delivery.DeliveryError as exc:
        return _refused(request, exc), parsed.event, exc.reason
    update = JobUpdate.from_payload(parsed.payload)
    window = settings.window_s
    if window and delivery.outside_window(parsed.payload, now_s=now_s, window_s=window):
        if update.state is not JobStatus.QUEUED:  # a `waiting` only feeds a gauge: not worth a doubt
            log.debug("webhook about a job older than the replay window", extra={"job_id": update.job_id})
            return _json(200, outcome="too_old", job_id=update.job_id), parsed.event, "too_old"
        update = replace(update, aged=True)  # recorded, and started only once a poll confirms it
    response, outcome = await _record(request, parsed, update)
    return response, parsed.event, outcome


async def _record(request: web.Request, parsed: delivery.Delivery, update: JobUpdate) -> tuple[web.Response, str]:
    """Record the update; the answer, and the outcome to count."""
    store, metrics = request.app[STORE], request.app[METRICS]
    written = time.perf_counter()
    try:  # the Redis client's socket timeouts (GRS_REDIS_TIMEOUT) bound this call
        result = await store.of(parsed.instance).record(update, delivery_id=parsed.delivery_id)
    except _REDIS_ERRORS as exc:
        log.warning("redis unavailable", extra={"error": type(exc).__name__, "job_id": update.job_id})
        response = _json(503, error="state store unavailable, not recorded")
        response.headers["Retry-After"] = "5"
        return response, "redis_unavailable"
    metrics.redis_write_seconds.observe(time.perf_counter() - written)
    if result.outcome is Outcome.APPLIED:
        metrics.jobs_recorded.labels(state=update.state.value).inc()
    if log.isEnabledFor(logging.DEBUG):
        log.debug("webhook recorded", extra=_recorded(parsed.delivery_id, update, result))
    if result.outcome is Outcome.CONFLICT:  # a delivery about another repository's job: nothing written
        return _json(409, error=_CONFLICTS[result.reason].format(job=update.job_id)), result.outcome.value
    body_out: dict[str, object] = {"outcome": result.outcome.value, "job_id": update.job_id, "state": result.state}
    if update.aged and result.outcome is Outcome.APPLIED:
        body_out["aged"] = True
    if result.moved:  # the id was recorded for another repository no poll had confirmed (whose is not said)
        log.info("webhook moved a job id from another repository", extra={"job_id": update.job_id, "repo": update.repo})
        body_out["moved"] = True
        return web.json_response(body_out), "moved"
    return web.json_response(body_out), result.outcome.value


_CONFLICTS = {
    "listed": "job {job} belongs to another repository, as Gitea's own listing shows; not recorded",
    "started": (
        "job {job} is recorded for another repository, and only a job's first delivery (queued or waiting) "
        "may move it there; not recorded"
    ),
    "moving": "job {job} kept moving between repositories while this delivery was recorded; not recorded",
}


def _recorded(delivery_id: str | None, update: JobUpdate, result: RecordResult) -> dict[str, object]:
    return {
        "delivery_id": delivery_id,
        "job_id": update.job_id,
        "action": update.state.value,
        "outcome": result.outcome.value,
        "previous": result.previous,
    }


def _refused(request: web.Request, exc: delivery.DeliveryError) -> web.Response:
    """A refused delivery's answer: 401 for its signature, 403 for an owner its secret may not speak
    for (both counted as signature failures), 400 for its payload."""
    status = 401 if isinstance(exc, delivery.SignatureError) else 403 if isinstance(exc, delivery.OwnerError) else 400
    if status != 400:
        request.app[METRICS].signature_failures.labels(reason=exc.reason).inc()
    log.info("webhook refused", extra={"reason": exc.reason, "detail": exc.message, "remote": request.remote})
    return _json(status, error=exc.message)


async def healthz(request: web.Request) -> web.Response:
    """Liveness: the process serves requests."""
    return _json(200, status="ok")


async def readyz(request: web.Request) -> web.Response:
    """Readiness: not shutting down, and Redis answers."""
    if request.app[STOPPING].is_set():
        return _json(503, status="stopping")
    try:
        await asyncio.wait_for(request.app[STORE].ping(), timeout=request.app[SETTINGS].redis_timeout)
    except _REDIS_ERRORS:
        return _json(503, status="redis unavailable")
    return _json(200, status="ready")


async def metrics_endpoint(request: web.Request) -> web.Response:
    """Prometheus exposition of this process's registry."""
    payload = generate_latest(request.app[REGISTRY])
    return web.Response(body=payload, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _mark_stopping(app: web.Application) -> None:
    app[STOPPING].set()


def create_app(
    settings: Settings,
    *,
    redis: Redis | RedisCluster,
    registry: CollectorRegistry,
    clock: Callable[[], float] = time.time,
) -> web.Application:
    """Build the receiver application around an existing Redis client and metrics registry."""
    # The handler enforces max_body_bytes itself while streaming; this is a backstop.
    app = web.Application(client_max_size=settings.max_body_bytes + 1)
    app[SETTINGS] = settings
    app[REGISTRY] = registry
    app[METRICS] = Metrics.create(registry)
    ttls = Ttls(job=settings.job_ttl, completed=settings.completed_ttl, delivery=settings.delivery_ttl)
    app[STORE] = JobStore(store_client(redis), prefix=settings.redis_prefix, ttls=ttls)
    app[STOPPING] = asyncio.Event()
    app[CLOCK] = clock
    app[KEYS] = settings.signing_keys
    app[DERIVER] = settings.deriver
    app.on_shutdown.append(_mark_stopping)
    app.router.add_post(settings.webhook_path, webhook)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_endpoint)
    return app
