"""The benchmark scenarios. Each returns figures; none asserts a time (that is for humans to read)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from tests.bench.stack import NS, Deliveries, JobWatch, Proc, Stack, checked, metric
from tests.fake_gitea import FakeGitea
from tests.kube_cluster import api_request
from tests.redis_server import free_port

_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Figure:
    """One measured number and the target it is read against (`ok` None: no target)."""

    name: str
    value: float
    unit: str
    target: str = ""
    ok: bool | None = None
    detail: str = ""


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))] if ordered else float("nan")


async def _post(session: aiohttp.ClientSession, url: str, raw: bytes, headers: dict[str, str]) -> None:
    async with session.post(url, data=raw, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"delivery answered {resp.status}: {await resp.text()}")
        await resp.read()


async def _paced(count: int, rate: float, one: Callable[[int], Coroutine[Any, Any, None]]) -> None:
    """Start `one(i)` at `rate` per second (open loop), and wait for all of them."""
    start = time.perf_counter()
    tasks: list[asyncio.Task[None]] = []
    for i in range(count):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)


def _requests_file(path: Path, url: str, job_ids: Iterable[int], repo: Callable[[int], str] | None = None) -> Path:
    """Raw, signed HTTP requests, one delivery of a distinct job each (of `repo(job_id)`, or the default
    repository), NUL-separated (wrk.lua, sender)."""
    d = Deliveries()
    host = url.split("/")[2]
    with path.open("wb") as out:
        for job_id in job_ids:
            raw, headers = d.make(job_id, repo=repo(job_id)) if repo else d.make(job_id)
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            out.write(f"POST /webhook HTTP/1.1\r\nHost: {host}\r\n{head}Content-Length: {len(raw)}\r\n\r\n".encode())
            out.write(raw + b"\0")
    return path


async def _sender(path: Path, url: str, concurrency: int, rate: float = 0) -> dict[str, Any]:
    """Run `tests.bench.sender` as a process of its own over the requests in `path` (see there)."""
    host, port = url.split("/")[2].split(":")
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bench.sender",
        str(path),
        host,
        port,
        str(concurrency),
        str(rate),
        stdout=asyncio.subprocess.PIPE,
        cwd=_ROOT,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"tests.bench.sender exited {proc.returncode}")
    result: dict[str, Any] = json.loads(out)
    return result


async def intake(stack: Stack, *, deliveries: int, concurrency: int, repeats: int) -> list[Figure]:
    """`deliveries` signed deliveries from a concurrent sender (its own process) to one receiver process
    with only Redis beside it: the seconds until every one is answered 2xx, i.e. durable in Redis."""
    proc, url = stack.receiver()
    warm = _requests_file(stack.dir / "warm.bin", url, range(7 * 10**8, 7 * 10**8 + 2 * concurrency))
    await _sender(warm, url, concurrency)  # connections to Redis opened, code paths warm: as in service
    runs: list[float] = []
    for r in range(repeats):
        first = 8 * 10**8 + r * deliveries
        path = _requests_file(stack.dir / f"intake{r}.bin", url, range(first, first + deliveries))
        cpu0 = proc.cpu_seconds()
        got = await _sender(path, url, concurrency)
        if got["ok"] != deliveries:
            raise RuntimeError(f"intake: {got['ok']} of {deliveries} deliveries answered 2xx")
        runs.append(got["seconds"])
        cpu = proc.cpu_seconds() - cpu0
    mid = statistics.median(runs)
    spread = f" (runs: {', '.join(f'{t:.2f}' for t in sorted(runs))} s)" if len(runs) > 1 else ""
    return [
        Figure(
            f"intake: {deliveries:,} deliveries queued in (concurrent sender)",
            mid,
            "s",
            "<= 1 s",
            mid <= 1.0,
            detail=f"{spread} ({concurrency} connections, sender in its own process)",
        ),
        Figure("intake: receiver CPU per delivery (last run)", cpu / deliveries * 1e6, "µs"),
    ]


def _wrk(
    stack: Stack, proc: Proc, url: str, *, seconds: float, concurrency: int, run: int = 0
) -> tuple[int, float, float]:
    """Sustained load from wrk (C, from Debian), so the load generator takes little of the 2 cores.

    Returns (deliveries, seconds wrk ran, receiver CPU-seconds meanwhile)."""
    # more than the receiver can take: no delivery is sent twice
    first = 10**8 + run * 10**7
    path = _requests_file(stack.dir / "requests.bin", url, range(first, first + int(seconds * 6000)))
    threads = 2
    cpu0 = proc.cpu_seconds()
    done = subprocess.run(
        [
            shutil.which("wrk") or "wrk",
            f"-t{threads}",
            f"-c{concurrency}",
            f"-d{max(1, round(seconds))}s",
            "-s",
            str(Path(__file__).with_name("wrk.lua")),
            url,
            "--",
            str(path),
            str(threads),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    cpu = proc.cpu_seconds() - cpu0
    if "Non-2xx" in done.stdout:
        raise RuntimeError(f"wrk saw non-2xx answers:\n{done.stdout}")
    found = re.search(r"(\d+) requests in ([\d.]+)s", done.stdout)
    assert found, done.stdout
    return int(found.group(1)), float(found.group(2)), cpu


async def ingest(stack: Stack, *, seconds: float, concurrency: int, paced_rate: int, repeats: int = 1) -> list[Figure]:
    """Signed ~5 KB deliveries to one receiver process: latency at a fixed rate, then sustained
    throughput and its CPU cost (`repeats` runs of `seconds` each, median and spread)."""
    proc, url = stack.receiver()
    d = Deliveries()
    next_id = iter(range(1, 10**9))
    # latency at a fixed rate, from the light sender (the bench's aiohttp client would cost about what
    # the receiver does, and its own queueing would be counted as the receiver's)
    await _sender(_requests_file(stack.dir / "paced-warm.bin", url, range(8 * 10**8, 8 * 10**8 + 200)), url, 32)
    paced = _requests_file(stack.dir / "paced.bin", url, range(9 * 10**8, 9 * 10**8 + int(paced_rate * seconds)))
    latencies: list[float] = (await _sender(paced, url, concurrency, rate=paced_rate))["latencies"]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:

        async def worker(until: float, counter: list[int]) -> None:
            while time.perf_counter() < until:
                raw, headers = d.make(next(next_id))
                await _post(session, url, raw, headers)
                counter[0] += 1

        runs: list[tuple[int, float, float]] = []
        for run in range(repeats):
            if shutil.which("wrk"):
                runs.append(
                    await asyncio.to_thread(_wrk, stack, proc, url, seconds=seconds, concurrency=concurrency, run=run)
                )
                loader = "wrk"
            else:  # this process is the load generator, and takes a core from the receiver
                done = [0]
                cpu0, t0 = proc.cpu_seconds(), time.perf_counter()
                await asyncio.gather(*(worker(t0 + seconds, done) for _ in range(concurrency)))
                runs.append((done[0], time.perf_counter() - t0, proc.cpu_seconds() - cpu0))
                loader = "aiohttp client"
    rates = sorted(total / elapsed for total, elapsed, _ in runs)
    per_cpu = sorted(total / cpu for total, _, cpu in runs if cpu)
    rate, p99 = statistics.median(rates), pct(latencies, 0.99) * 1000

    def spread(values: list[float]) -> str:
        return f" (runs: {', '.join(f'{v:.0f}' for v in values)})" if len(values) > 1 else ""

    return [
        Figure(f"ingest: p50 latency at {paced_rate}/s", pct(latencies, 0.5) * 1000, "ms"),
        Figure(f"ingest: p99 latency at {paced_rate}/s", p99, "ms", "<= 20 ms", p99 <= 20),
        Figure(
            "ingest: sustained deliveries/s, one process",
            rate,
            "/s",
            ">= 3000",
            rate >= 3000,
            f"{spread(rates)} (median of {len(rates)} x {seconds:g} s, load from {loader})",
        ),
        Figure(
            "ingest: deliveries per receiver CPU-second",
            statistics.median(per_cpu) if per_cpu else float("nan"),
            "/cpu-s",
            detail=spread(per_cpu),
        ),
        Figure("memory: receiver peak RSS", proc.peak_rss_mb(), "MB", "<= 150 MB", proc.peak_rss_mb() <= 150),
    ]


async def _ready(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(300):
            with contextlib.suppress(aiohttp.ClientError):
                async with s.get(f"{url}/readyz") as r:
                    if r.status == 200:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError("reconciler not ready")


async def _wait_seen(watch: JobWatch, ids: set[int], timeout: float) -> None:
    deadline = time.perf_counter() + timeout
    while not ids <= set(watch.seen) and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)


async def _settled(stack: Stack, timeout: float = 300) -> None:
    """Wait until the reconciler has written every group's first status: measure steady state, not start-up."""
    assert stack.kube is not None
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        code, body = api_request(stack.kube, "GET", f"/apis/gitea.bpg.pw/v1alpha1/namespaces/{NS}/runnergroups")
        if code == 200 and all((g.get("status") or {}).get("observedGeneration") for g in body["items"]):
            return  # (a new CRD may be answered with 404 for a moment: wait on)
        await asyncio.sleep(0.5)
    raise RuntimeError("the reconciler did not write every group's status")


async def _watched(stack: Stack) -> tuple[str, str, JobWatch]:
    """Start the reconciler and the receiver, and watch runner Jobs appear."""
    assert stack.kube is not None
    _, rec_url = stack.reconciler()
    _, url = stack.receiver()
    await _ready(rec_url)
    await _settled(stack)
    watch = JobWatch(stack.kube)
    watch.start()
    await asyncio.sleep(0.5)
    return rec_url, url, watch


async def time_to_runner(stack: Stack, *, groups: int, jobs: int, rate: float) -> tuple[list[float], dict[str, Any]]:
    """Webhook received -> runner Job created, for single jobs at `rate`/s; plus the reconcile costs."""
    assert stack.kube is not None
    stack.groups(groups)
    rec_url, url, watch = await _watched(stack)
    d = Deliveries()
    sent: dict[int, float] = {}
    async with aiohttp.ClientSession() as session:

        async def one(i: int) -> None:
            job_id = 1_000_000 + i
            raw, headers = d.make(job_id, repo=f"acme/r{i % groups}")
            sent[job_id] = time.perf_counter()
            await _post(session, url, raw, headers)

        await _paced(jobs, rate, one)
    await _wait_seen(watch, set(sent), 30)
    await watch.stop()
    latencies = [watch.seen[j] - t for j, t in sent.items() if j in watch.seen]
    costs = await metric(rec_url, "grs_reconcile")
    return latencies, {"missing": len(sent) - len(latencies), **costs}


async def burst(stack: Stack, *, groups: int, jobs: int) -> dict[str, Any]:
    """`jobs` queued across `groups` groups within about a second: all created, none twice, how fast."""
    assert stack.kube is not None
    stack.groups(groups, maxActiveRunners=max(100, jobs // groups + 1))
    rec_url, url, watch = await _watched(stack)
    ids = {2_000_000 + i for i in range(jobs)}
    path = _requests_file(stack.dir / "burst.bin", url, sorted(ids), repo=lambda i: f"acme/r{i % groups}")
    # the light sender, a process of its own (50 connections): the bench's aiohttp client took ~1.4
    # CPU-s of a burst from the processes measured; its clock is mapped onto this process' clock
    sent = await _sender(path, url, 50)
    assert sent["ok"] == jobs, sent
    start = sent["started_at"] - (time.time() - time.perf_counter())
    queued_in = float(sent["seconds"])
    await _wait_seen(watch, ids, 120)
    await watch.stop()
    last = max((watch.seen[i] for i in ids if i in watch.seen), default=start)
    _, listing = api_request(stack.kube, "GET", f"/apis/batch/v1/namespaces/{NS}/jobs")
    per_job: dict[str, int] = {}
    for job in listing["items"]:
        key = job["metadata"]["annotations"]["gitea.bpg.pw/job-id"]
        per_job[key] = per_job.get(key, 0) + 1
    return {
        "queued_in": queued_in,
        "all_created_in": last - start,
        "created": sum(1 for i in ids if str(i) in per_job),
        "twice": sum(1 for n in per_job.values() if n > 1),
        "costs": await metric(rec_url, "grs_reconcile"),
    }


async def _fake_gitea(fake: FakeGitea) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(fake.app(), access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def polling_only(stack: Stack, *, jobs: int, rate: float, interval: float) -> list[float]:
    """Time to runner with webhooks off and the seed operator's 10 s poll: the baseline."""
    assert stack.kube is not None
    fake = FakeGitea(token="tok")
    runner, gitea_url = await _fake_gitea(fake)
    stack.groups(1, gitea={"url": gitea_url})
    # this fake is the reconciler's default instance: a group naming another, unnamed Gitea is refused
    _, rec_url = stack.reconciler(
        GRS_POLL_ENABLED="true", GRS_POLL_INTERVAL=str(interval), GRS_POLL_JITTER="0", GRS_GITEA_URL=gitea_url
    )
    await _ready(rec_url)
    watch = JobWatch(stack.kube)
    watch.start()
    added: dict[int, float] = {}

    async def one(i: int) -> None:
        job_id = 3_000_000 + i
        fake.add_job(job_id, repo="acme/r0", labels=[])
        added[job_id] = time.perf_counter()

    await _paced(jobs, rate, one)
    await _wait_seen(watch, set(added), interval * 3)
    await watch.stop()
    await runner.cleanup()
    checked(fake)
    return [watch.seen[j] - t for j, t in added.items() if j in watch.seen]


async def polling_cost(stack: Stack, *, groups: int, scopes: int, jobs_per_scope: int, cycles: int) -> dict[str, Any]:
    """Gitea API requests per poll cycle with many groups over a few scopes."""
    assert stack.kube is not None
    fake = FakeGitea(token="tok")
    times: list[float] = []
    original = fake._auth

    def counting(request: web.Request, endpoint: str) -> web.Response | None:
        if endpoint.endswith("_jobs"):  # the poll's own requests; a scope's proof lists its runners once
            times.append(time.perf_counter())
        return original(request, endpoint)

    fake._auth = counting  # type: ignore[method-assign]
    for s in range(scopes):
        for j in range(jobs_per_scope):
            fake.add_job(4_000_000 + s * 10_000 + j, repo=f"org{s}/repo{j % 7}", labels=["no-group-has-this"])
    runner, gitea_url = await _fake_gitea(fake)
    stack.groups(
        groups,
        each=lambda i: {"scope": "org", "repo": None, "org": f"org{i % scopes}", "labels": [f"l{i}"]},
        gitea={"url": gitea_url},
        maxActiveRunners=1,
    )
    interval = 2.0
    # this fake is the reconciler's default instance: a group naming another, unnamed Gitea is refused
    _, rec_url = stack.reconciler(
        GRS_POLL_ENABLED="true", GRS_POLL_INTERVAL=str(interval), GRS_POLL_JITTER="0", GRS_GITEA_URL=gitea_url
    )
    await _ready(rec_url)
    await asyncio.sleep(interval * (cycles + 1))
    await runner.cleanup()
    checked(fake)
    bursts: list[int] = []
    last = -1e9
    for t in times:
        if t - last > interval / 2:
            bursts.append(0)
        bursts[-1] += 1
        last = t
    pages = -(-jobs_per_scope // 50)
    return {"per_cycle": bursts, "expected": scopes * pages, "groups": groups, "scopes": scopes, "pages": pages}


async def reconciler_memory(stack: Stack, *, jobs: int) -> float:
    """Peak RSS of the reconciler with `jobs` queued jobs tracked (one group, one slot)."""
    stack.groups(1, maxActiveRunners=1)
    proc, rec_url = stack.reconciler()
    _, url = stack.receiver()
    await _ready(rec_url)
    d = Deliveries()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=32)) as session:
        sem = asyncio.Semaphore(32)

        async def one(i: int) -> None:
            async with sem:
                raw, headers = d.make(5_000_000 + i, repo="acme/r0")
                await _post(session, url, raw, headers)

        await asyncio.gather(*(one(i) for i in range(jobs)))
    await asyncio.sleep(5)  # several passes over all of them
    passes = await metric(rec_url, "grs_reconcile_pass_duration_seconds_count")
    assert sum(passes.values()) > 0
    return proc.peak_rss_mb()


def summary(values: list[float]) -> str:
    """p50 / p99 / max in ms."""
    if not values:
        return "no samples"
    return (
        f"p50 {pct(values, 0.5) * 1000:.1f} ms, p99 {pct(values, 0.99) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms"
    )


def mean_of(costs: dict[str, float], name: str) -> float:
    """Mean of a histogram from its _sum and _count samples, in ms."""
    count = costs.get(f"{name}_count", 0.0)
    return costs.get(f"{name}_sum", 0.0) / count * 1000 if count else float("nan")


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")
