"""Benchmarks: `python -m bench` prints each figure next to its target; `--smoke` is CI's short pass.

Everything runs on loopback against the real peers of the test harness: redis-server, kube-apiserver
+ etcd, and our two processes started as users start them. The load comes from this process.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

from bench import scenarios as sc
from bench.node import measure
from bench.stack import Stack, machine, workdir
from reconciler.settings import Settings
from tests.e2e.node_stack import start_stack
from tests.node.cluster import NodeCluster
from tests.redis_server import RedisServer

FULL = {
    "ingest_s": 10.0,
    "ingest_repeats": 3,
    "intake_deliveries": 1000,
    "intake_repeats": 5,
    "ttr_jobs": 100,
    "burst_jobs": 1000,
    "burst_groups": 20,
    "burst_repeats": 3,
    "poll_jobs": 20,
    "scale_groups": (1, 100, 1000),
    "scale_jobs": 30,
    "scale_burst": 1000,
    "memory_jobs": 10_000,
    "cost_groups": 200,
    "node_rounds": 10,
    "node_jobs": 3,
}
SMOKE = {
    "ingest_s": 1.0,
    "ingest_repeats": 1,
    "intake_deliveries": 40,
    "intake_repeats": 1,
    "ttr_jobs": 5,
    "burst_jobs": 40,
    "burst_groups": 4,
    "burst_repeats": 1,
    "poll_jobs": 2,
    "scale_groups": (1, 3),
    "scale_jobs": 3,
    "scale_burst": 20,
    "memory_jobs": 200,
    "cost_groups": 10,
    "node_rounds": 1,
    "node_jobs": 2,
}

Row = tuple[str, str, str, str]


def row(name: str, value: str, target: str = "", ok: bool | None = None) -> Row:
    return name, value, target, "" if ok is None else ("met" if ok else "MISSED")


def figure_rows(figures: list[sc.Figure]) -> list[Row]:
    return [row(f.name, f"{f.value:.{2 if f.unit == 's' else 1}f} {f.unit}{f.detail}", f.target, f.ok) for f in figures]


async def run_ingest(cfg: dict[str, Any]) -> list[Row]:
    with workdir() as d, Stack(d, kube=False) as stack:
        figures = await sc.ingest(
            stack, seconds=cfg["ingest_s"], concurrency=32, paced_rate=1000, repeats=cfg["ingest_repeats"]
        )
    return figure_rows(figures)


async def run_intake(cfg: dict[str, Any]) -> list[Row]:
    """Only the receiver and Redis run: the figure is about intake, not a reconciler sharing the cores."""
    with workdir() as d, Stack(d, kube=False) as stack:
        figures = await sc.intake(
            stack, deliveries=cfg["intake_deliveries"], concurrency=50, repeats=cfg["intake_repeats"]
        )
    return figure_rows(figures)


async def run_time_to_runner(cfg: dict[str, Any]) -> tuple[list[Row], list[float]]:
    with workdir() as d, Stack(d, kube=True) as stack:
        lat, costs = await sc.time_to_runner(stack, groups=1, jobs=cfg["ttr_jobs"], rate=10)
    p50, p99 = sc.pct(lat, 0.5) * 1000, sc.pct(lat, 0.99) * 1000
    return [
        row("time to runner at 10/s: p50", f"{p50:.1f} ms", "<= 30 ms", p50 <= 30),
        row("time to runner at 10/s: p99", f"{p99:.1f} ms", "<= 150 ms", p99 <= 150),
        row("time to runner: jobs without a runner", str(costs["missing"]), "0", costs["missing"] == 0),
    ], lat


async def run_burst(cfg: dict[str, Any]) -> list[Row]:
    runs = []
    for _ in range(cfg["burst_repeats"]):  # each on a fresh stack; the 2-core VM varies run to run
        with workdir() as d, Stack(d, kube=True) as stack:
            runs.append(await sc.burst(stack, groups=cfg["burst_groups"], jobs=cfg["burst_jobs"]))
    n = cfg["burst_jobs"]
    times = sorted(r["all_created_in"] for r in runs)
    queued = sorted(r["queued_in"] for r in runs)
    mid = times[len(times) // 2]
    spread = f" (runs: {', '.join(f'{t:.1f}' for t in times)} s)" if len(times) > 1 else ""
    ok = all(r["created"] == n and r["twice"] == 0 for r in runs)
    return [
        row(
            f"burst: {n} jobs over {cfg['burst_groups']} groups queued in (median)",
            f"{queued[len(queued) // 2]:.2f} s",
            "<= 1 s",
            queued[len(queued) // 2] <= 1.0,
        ),
        row("burst: all runner Jobs created in (median)", f"{mid:.2f} s{spread}", "<= 15 s", mid <= 15),
        row(
            "burst: created / missing / twice, every run",
            " ; ".join(f"{r['created']} / {n - r['created']} / {r['twice']}" for r in runs),
            f"{n} / 0 / 0",
            ok,
        ),
        row(
            "burst: creates per second (median run)",
            f"{n / mid:.0f} /s",
            f"client QPS: no client-side limit (kubernetes_asyncio); up to "
            f"{Settings.model_fields['create_concurrency'].default} creates in flight in all",
        ),
    ]


async def run_side_by_side(cfg: dict[str, Any], webhook: list[float]) -> list[Row]:
    with workdir() as d, Stack(d, kube=True) as stack:
        polled = await sc.polling_only(stack, jobs=cfg["poll_jobs"], rate=1.0, interval=10.0)
    ratio = sc.median(polled) / sc.median(webhook) if webhook and polled else float("nan")
    return [
        row("polling only (10 s interval): time to runner", sc.summary(polled)),
        row("webhook mode: time to runner", sc.summary(webhook)),
        row("polling / webhook, median time to runner", f"{ratio:.0f}x", ">= 100x", ratio >= 100),
    ]


async def run_polling_cost(cfg: dict[str, Any]) -> list[Row]:
    with workdir() as d, Stack(d, kube=True) as stack:
        r = await sc.polling_cost(stack, groups=cfg["cost_groups"], scopes=5, jobs_per_scope=120, cycles=3)
    full = r["per_cycle"][1:-1] or r["per_cycle"]
    ok = bool(full) and all(c == r["expected"] for c in full)
    return [
        row(
            f"polling: Gitea requests per cycle, {r['groups']} groups over {r['scopes']} scopes",
            f"{full}",
            f"= scopes x pages = {r['scopes']} x {r['pages']} = {r['expected']}",
            ok,
        )
    ]


async def run_memory(cfg: dict[str, Any]) -> list[Row]:
    with workdir() as d, Stack(d, kube=True) as stack:
        rss = await sc.reconciler_memory(stack, jobs=cfg["memory_jobs"])
    return [
        row(f"memory: reconciler peak RSS, {cfg['memory_jobs']} queued jobs", f"{rss:.0f} MB", "<= 150 MB", rss <= 150)
    ]


async def run_scaling(cfg: dict[str, Any]) -> list[Row]:
    rows: list[Row] = []
    for groups in cfg["scale_groups"]:
        with workdir() as d, Stack(d, kube=True) as stack:
            lat, _ = await sc.time_to_runner(stack, groups=groups, jobs=cfg["scale_jobs"], rate=10)
        with workdir() as d, Stack(d, kube=True) as stack:
            b = await sc.burst(stack, groups=groups, jobs=cfg["scale_burst"])
        rows.append(row(f"scaling, {groups} groups: time to runner", sc.summary(lat)))
        rows.append(
            row(
                f"scaling, {groups} groups: whole pass / one group's pass (mean)",
                f"{sc.mean_of(b['costs'], 'grs_reconcile_pass_duration_seconds'):.2f} ms / "
                f"{sc.mean_of(b['costs'], 'grs_reconcile_duration_seconds'):.2f} ms",
                f"{cfg['scale_burst']}-job burst: all in {b['all_created_in']:.2f} s, {b['twice']} twice",
            )
        )
    return rows


async def run_node(cfg: dict[str, Any]) -> list[Row]:
    return await asyncio.to_thread(node_rows, cfg)


def node_rows(cfg: dict[str, Any]) -> list[Row]:
    """The pickup figures on a real node (a cluster of its own, so not while the tests' node is up)."""
    rounds, jobs = cfg["node_rounds"], cfg["node_jobs"]
    with workdir() as d:
        redis, node = RedisServer(d / "redis"), NodeCluster(d / "node")
        (d / "redis").mkdir()
        redis.start()
        node.start()
        stack = start_stack(d, node=node, redis=redis, GRS_POLL_INTERVAL="3")
        try:
            cold = measure(stack, mode="cold", rounds=rounds, jobs=jobs)
            warm = measure(stack, mode="warm", rounds=rounds, jobs=jobs)
            poll = measure(stack, mode="poll", rounds=max(1, rounds // 2), jobs=jobs)
        finally:
            stack.stop()
            node.stop()
            redis.stop()

    def ms(values: list[float]) -> str:
        return sc.summary(values) + f" ({len(values)} jobs)"

    def s(values: list[float]) -> str:
        return f"p50 {sc.pct(values, 0.5):.0f} s, p99 {sc.pct(values, 0.99):.0f} s ({len(values)} jobs)"

    cold_p50, cold_p99, warm_p50 = sc.pct(cold.api, 0.5), sc.pct(cold.api, 0.99), sc.pct(warm.api, 0.5)
    return [
        row(f"node, cold: queued -> picked ({rounds} x {jobs} jobs), Gitea's API read every 100 ms", ms(cold.api)),
        row("node, cold: p50", f"{cold_p50:.2f} s", "<= 3 s", cold_p50 <= 3),
        row("node, cold: p99", f"{cold_p99:.2f} s", "<= 6 s", cold_p99 <= 6),
        row(
            "node, cold: where the time goes (p50)",
            f"queued -> runner Job {sc.median(cold.to_job) * 1000:.0f} ms, -> Pod running "
            f"{sc.median(cold.to_pod) * 1000:.0f} ms, -> picked (registration + first fetch) "
            f"{sc.median(cold.to_pick) * 1000:.0f} ms",
        ),
        row("node, Gitea's webhook delivery: queued listed -> queued webhook received", ms(cold.delivery)),
        row("node, warm (minIdleRunners = jobs): queued -> picked", ms(warm.api)),
        row("node, warm: p50", f"{warm_p50:.2f} s", "<= 1 s", warm_p50 <= 1),
        row("node, polling only (3 s interval, no webhook): queued -> picked", ms(poll.api)),
        row(
            "node, by Gitea's clock (to the second): cold / warm / polling only",
            f"{s(cold.gitea)} / {s(warm.gitea)} / {s(poll.gitea)}",
        ),
        row("node: most runners alive at once, cold / warm", f"{cold.max_alive} / {warm.max_alive}", f"<= {2 * jobs}"),
    ]


def print_rows(title: str, rows: list[Row]) -> None:
    print(f"\n## {title}", flush=True)
    for name, value, target, verdict in rows:
        print(f"| {name} | {value} | {target} | {verdict} |", flush=True)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench")
    parser.add_argument("--smoke", action="store_true", help="a short pass that only checks the scripts work")
    parser.add_argument(
        "--only", default="", help="comma-separated: node,ttr,side,burst,polling,memory,scaling,intake,ingest"
    )
    args = parser.parse_args(argv)
    cfg = SMOKE if args.smoke else FULL
    only = set(filter(None, args.only.split(",")))

    def want(name: str) -> bool:
        return not only or name in only

    print(f"# gitea-runner-scaler benchmarks ({'smoke' if args.smoke else 'full'})\nmachine: {machine()}", flush=True)
    started = time.perf_counter()
    webhook: list[float] = []
    steps: list[tuple[str, str, Callable[[], Coroutine[Any, Any, list[Row]]]]] = [
        ("burst", "Burst", lambda: run_burst(cfg)),
        ("polling", "Polling cost", lambda: run_polling_cost(cfg)),
        ("memory", "Memory", lambda: run_memory(cfg)),
        ("scaling", "Scaling", lambda: run_scaling(cfg)),
        # Last: its saturation run leaves the disk busy with Redis's fsynced writes for a while, which
        # slows every scenario after it.
        ("intake", "Intake", lambda: run_intake(cfg)),
        ("ingest", "Ingest", lambda: run_ingest(cfg)),
    ]
    if not args.smoke or "node" in only:  # the tests exercise `measure` on their own node instead
        steps.insert(0, ("node", "On a real node", lambda: run_node(cfg)))
    if want("ttr") or want("side"):
        rows, webhook = await run_time_to_runner(cfg)
        print_rows("Time to runner", rows)
    if want("side"):
        print_rows("Side by side", await run_side_by_side(cfg, webhook))
    for key, title, step in steps:
        if want(key):
            print_rows(title, await step())
    print(f"\n(benchmarks took {time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
