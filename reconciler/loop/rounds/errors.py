"""Pure: which failures are worth retrying, as kopf sorts them.

Transient: Redis unavailable or failing over, timeouts, disconnects, HTTP 409/429/5xx, Gitea errors
(Gitea's reachability is reported by the poll's condition). Retried with backoff, counted in the
metrics, and never turned into Events. Permanent: anything else, e.g. the API server refusing a
runner Job (422) or our access (403). Reported once, as a condition and an Event, and not retried
until the RunnerGroup changes.
"""

from __future__ import annotations

import asyncio
from typing import Literal

import aiohttp
from redis.exceptions import RedisClusterException, RedisError

from reconciler.gitea.api import GiteaError
from reconciler.kube.api import PermanentError, TransientError

Kind = Literal["transient", "permanent"]

_TRANSIENT = (
    TransientError,
    GiteaError,
    RedisError,
    RedisClusterException,
    OSError,
    asyncio.TimeoutError,
    aiohttp.ClientError,
)


def kind_of(exc: BaseException) -> Kind:
    """Whether retrying later can help with `exc`."""
    if isinstance(exc, PermanentError):
        return "permanent"
    return "transient" if isinstance(exc, _TRANSIENT) else "permanent"
