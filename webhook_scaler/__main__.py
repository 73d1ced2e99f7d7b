"""Entry point of the receiver process: `webhook-scaler` (settings from `GRS_*` variables; see `--help`)."""

from __future__ import annotations

import logging

import uvloop
from aiohttp import web
from prometheus_client import CollectorRegistry

from webhook_scaler import logs
from webhook_scaler.app import create_app
from webhook_scaler.config import parse_or_exit, unknown
from webhook_scaler.settings import Settings
from webhook_scaler.store.client import connect

log = logging.getLogger("webhook_scaler")
DESCRIPTION = (
    "Receives Gitea workflow_job webhooks, verifies their HMAC signature, and records each job's state "
    "in Redis for the reconciler."
)


def main() -> None:
    """Parse settings, refuse to start on bad config, then serve until SIGTERM."""
    settings = parse_or_exit(Settings, program="webhook-scaler", description=DESCRIPTION)
    logs.setup(level=settings.log_level, fmt=settings.log_format)
    for line in unknown(Settings):
        log.warning(line)
    if settings.insecure_accept_unsigned_webhooks and not settings.webhook_secrets:
        log.warning("INSECURE: accepting unsigned webhook deliveries (GRS_INSECURE_ACCEPT_UNSIGNED_WEBHOOKS)")
    password = settings.redis_password.get_secret_value() if settings.redis_password else None
    redis = connect(
        settings.redis_url,
        password=password,
        timeout=settings.redis_timeout,
        max_connections=settings.redis_max_connections,
    )
    app = create_app(settings, redis=redis, registry=CollectorRegistry())

    async def close_redis(_: web.Application) -> None:
        await redis.aclose()

    app.on_cleanup.append(close_redis)
    log.info(
        "webhook-scaler listening",
        extra={"host": settings.listen_host, "port": settings.listen_port, "path": settings.webhook_path},
    )
    web.run_app(
        app,
        host=settings.listen_host,
        port=settings.listen_port,
        shutdown_timeout=settings.shutdown_timeout,
        access_log=None,
        print=None,
        loop=uvloop.new_event_loop(),  # asyncio's loop with its transports in C: see README, Intake
    )


if __name__ == "__main__":
    main()
