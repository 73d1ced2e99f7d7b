"""What the API server allows on this machine: runner Job creates per second from a plain client.

A burst's creates/s is read against these: one client sending one create after another, and the same
client keeping `concurrency` creates in flight. The Jobs are the reconciler's own (`build_job`), in a
namespace of their own, sent as raw JSON over one aiohttp session: no controller work at all.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp

from reconciler.kube.manifests import GroupRef, build_job
from reconciler.model.spec import RunnerGroupSpec
from tests.kube_cluster import ADMIN_TOKEN, KubeCluster, api_request, tls_context

SPEC = {
    "scope": "repo",
    "repo": "acme/r0",
    "gitea": {"url": "http://127.0.0.1:9"},
    "maxActiveRunners": 100,
    "registrationToken": {"secretRef": {"name": "gitea", "key": "reg"}},
    "authToken": {"secretRef": {"name": "gitea", "key": "api"}},
}


async def create_ceiling(cluster: KubeCluster, *, jobs: int, concurrency: int) -> dict[str, float]:
    """Creates/s sequentially and with `concurrency` in flight, `jobs` Jobs each."""
    spec = RunnerGroupSpec.model_validate(SPEC)
    out: dict[str, float] = {}
    for mode, width in (("sequential", 1), ("concurrent", concurrency)):
        ns = f"ceiling-{mode}"
        assert api_request(cluster, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
        group = GroupRef(ns, "g0", "00000000-0000-0000-0000-000000000000")
        bodies = [
            json.dumps(build_job(group, spec, name=f"g0-{i}", job_id=10**7 + i, queued_ms=0)).encode()
            for i in range(jobs)
        ]
        out[mode] = jobs / await _send(cluster, f"/apis/batch/v1/namespaces/{ns}/jobs", bodies, width)
    return out


async def _send(cluster: KubeCluster, path: str, bodies: list[bytes], width: int) -> float:
    """Seconds to POST every body with `width` requests in flight."""
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"}
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    connector = aiohttp.TCPConnector(ssl=tls_context(cluster), limit=width)
    async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

        async def worker() -> None:
            while not queue.empty():
                body = queue.get_nowait()
                async with session.post(cluster.server + path, data=body) as resp:
                    answer: Any = await resp.read()
                    if resp.status != 201:
                        raise RuntimeError(f"create answered {resp.status}: {answer[:300]!r}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(width)))
        return time.perf_counter() - started
