"""Memory and pass time as queued work grows: many groups, up to 100,000 queued jobs; and the curve.

The queued jobs are written by the receiver's own code minus HTTP: each is a signed delivery of
Gitea's shape (`Deliveries`), verified and parsed by `webhook_scaler.delivery.parse`, turned into a
`JobUpdate` and recorded by `JobStore.record` under its delivery id, into the Redis and under the
prefix the reconciler reads. The records are what the receiver writes; only the HTTP hop is skipped
(100,000 deliveries through it would take minutes of this small machine and measure nothing new:
`ingest` measures that hop).

A pass here is `Controller.reconcile_all`: read the queued jobs (every id, and the rows of new jobs and
of each group's oldest, see `reconciler.loop.rounds.demand`), give each to one group, start the groups' passes
(which run on their own).
"""

from __future__ import annotations

import asyncio
import html
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis

from tests.bench.scenarios import _ready, _settled, mean_of
from tests.bench.stack import SECRET, Deliveries, JobWatch, Proc, Stack, metric
from webhook_scaler import delivery
from webhook_scaler.store.jobs.model import JobUpdate
from webhook_scaler.store.jobs.records import JobStore, Outcome

PASS = "grs_reconcile_pass_duration_seconds"
UNSERVED = "acme/unserved"  # no group serves it: its jobs wake the reconciler and change no group's work


@dataclass(frozen=True)
class Point:
    """The figures at one size of the queue."""

    jobs: int  # queued jobs for the groups (besides the few wake-up jobs of the windows)
    passes: int  # passes in the measuring window
    pass_ms: float  # mean time of one whole pass in the window
    cpu_ms_per_pass: float  # reconciler CPU in the window, per pass (its group passes included)
    rss_mb: float  # reconciler VmRSS after the window
    hwm_mb: float  # reconciler VmHWM (peak since it started)
    redis_mb: float  # Redis used_memory
    redis_bytes_per_job: float  # used_memory grown by this step / jobs this step added


@dataclass(frozen=True)
class Growth:
    points: list[Point]
    groups: int
    probe_s: float | None  # a new group's job queued after all others: seconds to its runner Job, None if none


async def _record(store: JobStore, d: Deliveries, job_id: int, repo: str) -> None:
    """One queued job, recorded as the receiver records a delivery (verify, parse, `record`)."""
    raw, headers = d.make(job_id, repo=repo)
    parsed = delivery.parse(raw, headers=headers, secrets=[SECRET.encode()])
    assert parsed.payload is not None
    result = await store.record(JobUpdate.from_payload(parsed.payload), delivery_id=parsed.delivery_id)
    assert result.outcome is Outcome.APPLIED, result


async def _queue(store: JobStore, jobs: Sequence[tuple[int, str]], *, concurrency: int = 32) -> None:
    """Record `jobs` (id, repository) with `concurrency` writes in flight."""
    d, todo = Deliveries(), iter(jobs)

    async def worker() -> None:
        for job_id, repo in todo:
            await _record(store, d, job_id, repo)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _used_mb(redis: Redis) -> float:
    return float((await redis.info("memory"))["used_memory"]) / 2**20


async def _quiet(proc: Proc, *, timeout: float = 300) -> None:
    """Wait until the reconciler has worked through what was written: under 5% of a core for a second."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        cpu = proc.cpu_seconds()
        await asyncio.sleep(1.0)
        if proc.cpu_seconds() - cpu < 0.05:
            return
    raise RuntimeError("the reconciler did not settle")


async def _window(
    store: JobStore, proc: Proc, rec_url: str, *, seconds: float, next_id: int
) -> tuple[int, float, float, int]:
    """Passes, mean pass ms and CPU ms per pass over at least `seconds` and 5 passes (at most 3 minutes),
    woken 4 times a second by a new job of a repository no group serves (so that no group's own pass has
    anything new to do). Also returns how many wake-up jobs it queued."""
    d = Deliveries()
    before, cpu, start = await metric(rec_url, PASS), proc.cpu_seconds(), time.perf_counter()
    ticks = 0
    while True:
        elapsed = time.perf_counter() - start
        counted = (await metric(rec_url, f"{PASS}_count")).get(f"{PASS}_count", 0.0)
        if elapsed >= 180 or (elapsed >= seconds and counted - before.get(f"{PASS}_count", 0.0) >= 5):
            break
        await _record(store, d, next_id + ticks, UNSERVED)
        ticks += 1
        await asyncio.sleep(0.25)
    after, cpu = await metric(rec_url, PASS), proc.cpu_seconds() - cpu
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in (f"{PASS}_sum", f"{PASS}_count")}
    passes = int(delta[f"{PASS}_count"])
    return passes, mean_of(delta, PASS), cpu * 1000 / passes if passes else float("nan"), ticks


async def _wait_runners(watch: JobWatch, count: int, timeout: float = 600) -> None:
    deadline = time.perf_counter() + timeout
    while len(watch.seen) < count and time.perf_counter() < deadline:
        await asyncio.sleep(0.2)


async def growth(stack: Stack, *, groups: int, steps: Sequence[int], window: float, probe_timeout: float) -> Growth:
    """`groups` RunnerGroups of one repository each, maxActiveRunners 1 (so runner Jobs stay `groups`
    and the measure is about queued jobs); then queued jobs spread round-robin over them, up to each of
    `steps` in turn. At each: reconciler RSS, one pass's time, Redis memory per job. Last, the probe: a
    group added after, whose one job is queued after all the others."""
    assert stack.kube is not None
    stack.groups(groups, maxActiveRunners=1)
    proc, rec_url = stack.reconciler()
    await _ready(rec_url)
    for attempt in range(3):  # listing 1,000 groups can take the shared 2 cores' API server over 30 s
        try:
            await _settled(stack)
            break
        except TimeoutError:
            if attempt == 2:
                raise
    watch = JobWatch(stack.kube)
    watch.start()
    redis = Redis.from_url(stack.redis.url)
    store = JobStore(redis, prefix=stack.prefix)
    points: list[Point] = []
    done, tick_id = 0, 9_000_000
    try:
        for n in steps:
            used = await _used_mb(redis)
            await _queue(store, [(6_000_000 + i, f"acme/r{i % groups}") for i in range(done, n)])
            per_job = (await _used_mb(redis) - used) * 2**20 / (n - done)
            done = n
            await _wait_runners(watch, min(groups, n))
            await _quiet(proc)
            passes, pass_ms, cpu_ms, ticks = await _window(store, proc, rec_url, seconds=window, next_id=tick_id)
            tick_id += ticks
            points.append(
                Point(n, passes, pass_ms, cpu_ms, proc.rss_mb(), proc.peak_rss_mb(),
                      await _used_mb(redis), per_job)
            )  # fmt: skip
        probe = await _probe(stack, store, watch, groups=groups, timeout=probe_timeout)
    finally:
        await watch.stop()
        await redis.aclose()
    return Growth(points, groups, probe)


async def _probe(stack: Stack, store: JobStore, watch: JobWatch, *, groups: int, timeout: float) -> float | None:
    """Add group g{groups} and queue its one job, newer than every other: seconds until its runner Job."""
    stack.groups(1, first=groups, maxActiveRunners=1)
    await asyncio.sleep(1.0)  # the reconciler's informer sees the new group
    job_id, start = 8_000_000, time.perf_counter()
    await _record(store, Deliveries(), job_id, f"acme/r{groups}")
    while job_id not in watch.seen and time.perf_counter() - start < timeout:
        await asyncio.sleep(0.05)
    return watch.seen[job_id] - start if job_id in watch.seen else None


# -- the curve, as a small hand-written SVG (no plotting dependency) ----------------------------------
W, H, PAD_L, PAD_R, PAD_T, PAD_B = 360, 290, 52, 14, 76, 44


def _nice(v: float) -> float:
    """The smallest 1, 2 or 5 x 10^k at or above v."""
    k = 1.0
    while k * 10 < v:
        k *= 10
    while k > v * 10:
        k /= 10
    return next(m * k for m in (1, 2, 5, 10) if m * k >= v)


def _panel(x0: int, title: str, xs: list[int], lines: list[tuple[str, str, list[float]]], hline: float | None) -> str:
    """One chart: `lines` (label, colour, ys) over xs, linear axes from 0; `hline` a dashed target."""
    xmax = _nice(max(xs))
    ymax = _nice(max([*(y for _, _, ys in lines for y in ys if not math.isnan(y)), hline or 0.0, 1.0]) * 1.05)
    pw, ph = W - PAD_L - PAD_R, H - PAD_T - PAD_B

    def px(x: float) -> float:
        return x0 + PAD_L + x / xmax * pw

    def py(y: float) -> float:
        return PAD_T + ph - y / ymax * ph

    out = [f'<text x="{x0 + PAD_L}" y="18" font-weight="bold">{title}</text>']
    for i in range(6):
        y, x = ymax * i / 5, xmax * i / 5
        out.append(f'<line x1="{px(0)}" y1="{py(y):.1f}" x2="{px(xmax)}" y2="{py(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{px(0) - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{y:g}</text>')
        out.append(f'<text x="{px(x):.1f}" y="{py(0) + 16}" text-anchor="middle">{x / 1000:g}k</text>')
    out.append(f'<text x="{px(xmax / 2):.1f}" y="{H - 8}" text-anchor="middle">queued jobs</text>')
    if hline is not None:
        out.append(
            f'<line x1="{px(0)}" y1="{py(hline):.1f}" x2="{px(xmax)}" y2="{py(hline):.1f}" stroke="#c00" '
            f'stroke-dasharray="6 4"/><text x="{px(xmax) - 2}" y="{py(hline) - 4:.1f}" text-anchor="end" '
            f'fill="#c00">target {hline:g}</text>'
        )
    for j, (label, colour, ys) in enumerate(lines):
        pts = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True) if not math.isnan(y))
        out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [f'<circle cx="{p.split(",")[0]}" cy="{p.split(",")[1]}" r="3" fill="{colour}"/>' for p in pts.split()]
        out.append(f'<text x="{px(0)}" y="{36 + 13 * j}" fill="{colour}">&#9644; {label}</text>')
    return "\n".join(out)


def render(result: Growth, path: Path, caption: str) -> None:
    """Write the curve: memory (reconciler RSS and peak, Redis) and one pass's time, against queued jobs."""
    xs = [p.jobs for p in result.points]
    memory = _panel(
        0,
        "memory (MB)",
        xs,
        [
            ("reconciler peak RSS", "#1f77b4", [p.hwm_mb for p in result.points]),
            ("reconciler RSS", "#7fb3e0", [p.rss_mb for p in result.points]),
            ("Redis used_memory", "#2ca02c", [p.redis_mb for p in result.points]),
        ],
        400.0,
    )
    passes = _panel(
        W,
        "one whole pass, reconcile_all (ms, mean)",
        xs,
        [
            ("wall time", "#d62728", [p.pass_ms for p in result.points]),
            ("reconciler CPU time", "#ff9f80", [p.cpu_ms_per_pass for p in result.points]),
        ],
        None,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{2 * W}" height="{H + 18}" viewBox="0 0 {2 * W} {H + 18}" '
        f'font-family="sans-serif" font-size="11">\n<rect width="100%" height="100%" fill="white"/>\n'
        f"{memory}\n{passes}\n"
        f'<text x="{W}" y="{H + 12}" text-anchor="middle" fill="#555">{html.escape(caption)}</text>\n</svg>\n'
    )
