"""Exactly one runner per job and never above the cap, under faults: reconciler replicas paused longer
than their lease and killed mid-pass, Redis flushed mid-burst, webhooks lost. Real Redis, a real API
server, our real processes; runners and Gitea simulated (see `tests.faults`). Each test prints its
figures in the run's summary."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from redis.asyncio import Redis

from tests.faults import Rig
from tests.kube_cluster import KubeCluster
from tests.redis_server import RedisServer

pytestmark = pytest.mark.kube

Report = Callable[[str], None]


async def test_replicas_paused_longer_than_their_lease(
    kube: KubeCluster, redis_server: RedisServer, tmp_path: Path, report: Report
) -> None:
    """SIGSTOP one replica, then the other, for 20 s each (the lease is 15 s, the create deadline 10 s)
    while the burst is served: the one left running takes over, and the one resumed finds its
    reservations void."""
    async with Rig(kube, redis_server, tmp_path) as rig:
        a, b = rig.replica("a"), rig.replica("b")

        async def pauses() -> None:
            for n, (paused, seen) in enumerate(((a, 5), (b, 40)), start=1):
                await rig.runner_jobs_seen(seen)
                paused.signal(signal.SIGSTOP)
                await asyncio.sleep(20)  # the fault: this long without the process running at all
                paused.signal(signal.SIGCONT)
                rig.faults.append(f"pause {n}: replica {paused.name} stopped 20 s after {seen} runner Jobs")

        await rig.serve("paused replicas", pauses, report=report)


async def test_a_replica_killed_mid_pass_and_restarted(
    kube: KubeCluster, redis_server: RedisServer, tmp_path: Path, report: Report
) -> None:
    """SIGKILL a replica right as runner Jobs are being created, three times, alternating, and start it
    again at once, as Kubernetes would. Every Redis call of the replicas takes 0.1 s longer (a slow
    link), so a kill lands in the middle of a pass's claims, seats and creates; what a dead replica
    claimed or seated must not hold its jobs up, double them, or lift the cap."""
    async with Rig(kube, redis_server, tmp_path, redis_delay=0.1) as rig:
        replicas = [rig.replica("a"), rig.replica("b")]

        async def kills() -> None:
            for n, seen in enumerate((3, 20, 45)):
                await rig.runner_jobs_seen(seen)
                victim = replicas[n % 2]
                victim.kill()
                victim.start()
                rig.faults.append(f"replica {victim.name} killed after {seen} runner Jobs")

        await rig.serve("killed mid-pass", kills, report=report)


async def test_redis_flushed_in_the_middle_of_a_burst(
    kube: KubeCluster, redis_server: RedisServer, tmp_path: Path, report: Report
) -> None:
    """FLUSHALL once a third of the runners exist: the claims, seats and queue are gone. The queue comes
    back from polling Gitea, a new seat epoch starts, and the groups wait out creates of the old one."""
    async with Rig(kube, redis_server, tmp_path) as rig:
        rig.replica("a"), rig.replica("b")

        async def flush() -> None:
            await rig.runner_jobs_seen(30)
            redis = Redis.from_url(redis_server.url)
            await redis.flushall()
            await redis.aclose()
            rig.faults.append("Redis flushed after 30 runner Jobs")

        await rig.serve("Redis flushed", flush, timeout=300, report=report)


async def test_thirty_percent_of_webhooks_lost(
    kube: KubeCluster, redis_server: RedisServer, tmp_path: Path, report: Report
) -> None:
    """Every delivery (queued, in_progress, completed) is lost with probability 0.3: polling finds the
    jobs no webhook told of, and a job whose runner ran it unseen gets no second runner."""
    async with Rig(kube, redis_server, tmp_path, drop=0.3) as rig:
        rig.replica("a"), rig.replica("b")
        await rig.serve("30% of webhooks lost", rig.no_fault, report=report)
