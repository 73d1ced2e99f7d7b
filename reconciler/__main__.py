"""Entry point of the controller process: `reconciler` (settings from `GRS_*` variables; see `--help`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import ssl
import sys
from pathlib import Path
from typing import NoReturn

import aiohttp
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from reconciler import check
from reconciler.gitea.api import GiteaClient
from reconciler.kube.api import Kube, api_client
from reconciler.kube.egress import Egress
from reconciler.kube.runner_cache import RunnerCache
from reconciler.loop.rounds.controller import Controller
from reconciler.metrics import Metrics
from reconciler.settings import Settings
from webhook_scaler import logs
from webhook_scaler.config import parse_or_exit, unknown
from webhook_scaler.store.client import connect, store_client
from webhook_scaler.store.jobs.records import JobStore, Ttls

log = logging.getLogger("reconciler")
DESCRIPTION = (
    "Watches RunnerGroups and their runner Jobs, reads queued jobs from Redis, polls the Gitea API for "
    "anything a webhook missed, and creates one Kubernetes Job per queued job a group's labels match. "
    "`reconciler check` says whether each RunnerGroup works (see `reconciler check --help`)."
)


def health_app(controller: Controller, registry: CollectorRegistry) -> web.Application:
    """/healthz, /readyz (caches synced and Redis answers) and /metrics."""

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        synced = all(i.synced.is_set() for i in (controller.groups, controller.jobs, controller.pods))
        try:
            redis_ok = await asyncio.wait_for(controller.store.ping(), timeout=2)
        except Exception:
            redis_ok = False
        ok = synced and redis_ok
        return web.json_response({"synced": synced, "redis": redis_ok}, status=200 if ok else 503)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


def _store(settings: Settings) -> tuple[Redis | RedisCluster, JobStore]:
    """The Redis client and the job store on it (replies may wait up to 6 s: a pass is not a webhook)."""
    password = settings.redis_password.get_secret_value() if settings.redis_password else None
    redis = connect(
        settings.redis_url,
        password=password,
        timeout=max(settings.redis_timeout, 6.0),
        max_connections=settings.redis_max_connections,
    )
    ttls = Ttls(job=settings.job_ttl, completed=settings.completed_ttl, delivery=settings.delivery_ttl)
    return redis, JobStore(store_client(redis), prefix=settings.redis_prefix, ttls=ttls)


def egress(settings: Settings) -> tuple[Egress, ssl.SSLContext]:
    """How the reconciler and its runners reach Gitea: `GRS_GITEA_CA_FILE` (trusted besides the system's
    CAs) and this process's proxy variables; and the runners' shared cache (`GRS_RUNNER_CACHE_*`). A
    file that cannot be read, or a CA file that holds no certificate, stops the start with a clear message."""
    context = ssl.create_default_context()
    pem = _read("GRS_GITEA_CA_FILE", settings.gitea_ca_file)
    if settings.gitea_ca_file:  # an empty file too: it names no certificate
        try:
            context.load_verify_locations(cadata=pem)
        except (ssl.SSLError, ValueError):
            _exit("GRS_GITEA_CA_FILE", settings.gitea_ca_file, "no PEM certificate in it")
    cache = None
    if settings.runner_cache_url:
        secret = _read("GRS_RUNNER_CACHE_SECRET_FILE", settings.runner_cache_secret_file).strip()
        cache = RunnerCache(settings.runner_cache_url, secret=secret, secret_name=settings.runner_cache_secret_name)
    return Egress.of(ca_pem=pem, environ=os.environ, cache=cache), context


def _read(variable: str, path: str | None) -> str:
    """The text of the file a setting names ("" when it names none); exits 2 when it cannot be read."""
    if not path:
        return ""
    try:
        return Path(path).read_text()
    except OSError as exc:
        _exit(variable, path, exc.strerror or type(exc).__name__)
    except ValueError:  # not text
        _exit(variable, path, "not a text file")


def _exit(variable: str, path: str | None, reason: str) -> NoReturn:
    print(f"reconciler: {variable}={path}: {reason}", file=sys.stderr)
    raise SystemExit(2)


def _kube_problem(settings: Settings, exc: Exception) -> str:
    """Why no API client could be made, saying where the reconciler looked."""
    if settings.kubeconfig or os.environ.get("KUBERNETES_SERVICE_HOST"):
        return str(exc)
    path = os.environ.get("KUBECONFIG") or "~/.kube/config"
    return (
        f"not in a cluster (no KUBERNETES_SERVICE_HOST), and the kubeconfig {path} ($KUBECONFIG, else "
        f"~/.kube/config; or set GRS_KUBECONFIG) cannot be used: {exc}"
    )


async def serve(settings: Settings) -> None:
    """Run the controller and its health server until SIGTERM or SIGINT."""
    way_out, context = egress(settings)
    try:
        api = await api_client(settings.kubeconfig)
    except Exception as exc:
        print(f"reconciler: cannot load the Kubernetes configuration: {_kube_problem(settings, exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    redis, store = _store(settings)
    registry = CollectorRegistry()
    metrics = Metrics.create(registry)
    # trust_env: the calls to Gitea go through HTTP_PROXY / HTTPS_PROXY unless NO_PROXY says not.
    connector = aiohttp.TCPConnector(ssl=context)
    async with aiohttp.ClientSession(connector=connector, trust_env=True) as session:
        gitea = GiteaClient(
            session,
            timeout=settings.gitea_timeout,
            on_request=lambda endpoint, outcome: metrics.gitea_requests.labels(endpoint, outcome).inc(),
        )
        kube = Kube(api, namespaces=settings.namespaces, protected=settings.protected)
        controller = Controller(settings, kube=kube, store=store, gitea=gitea, metrics=metrics, egress=way_out)
        runner = web.AppRunner(health_app(controller, registry), access_log=None)
        await runner.setup()
        await web.TCPSite(runner, settings.listen_host, settings.listen_port).start()
        main = asyncio.create_task(controller.run())
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, main.cancel)
        log.info(
            "reconciler started",
            extra={"namespace": settings.watch_namespace or "*", "poll": settings.poll_enabled},
        )
        with contextlib.suppress(asyncio.CancelledError):
            await main
        log.info("reconciler stopping")
        await runner.cleanup()
    await api.close()
    await redis.aclose()


def main() -> None:
    """Parse settings, refuse to start on bad config, then run until SIGTERM (or run `reconciler check`)."""
    if sys.argv[1:2] == ["check"]:
        raise SystemExit(check.main(sys.argv[2:]))
    settings = parse_or_exit(Settings, program="reconciler", description=DESCRIPTION)
    logs.setup(level=settings.log_level, fmt=settings.log_format)
    for line in unknown(Settings):
        log.warning(line)
    asyncio.run(serve(settings))


if __name__ == "__main__":
    main()
