"""A light concurrent sender, run as its own process: `python -m tests.bench.sender FILE HOST PORT CONCURRENCY [RATE]`.

Sends the raw HTTP requests in FILE (NUL-separated, pre-built and pre-signed by the bench) over
CONCURRENCY keep-alive connections, each one request after another (as fast as they go, or RATE per
second in all, open loop), and prints one JSON line: the seconds from the first connect (and its
`time.time()`) to the last answer, how many answers were 2xx, and each request's latency. Plain asyncio
streams and no HTTP library: a few µs of CPU per request, on a core of its own, so the receiver is
measured rather than the load generator (the bench's aiohttp client costs about what the receiver does).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


async def _answer(reader: asyncio.StreamReader) -> int:
    """Read one HTTP answer; its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def _worker(
    connection: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    requests: Iterator[tuple[float, bytes]],
    statuses: list[int],
    latencies: list[float],
) -> None:
    """Send each request when it is due (at once if due is 0), one after another on one connection; a
    latency runs from when the request was due, so a late send counts against the receiver."""
    reader, writer = connection
    try:
        for due, raw in requests:
            if (delay := due - time.perf_counter()) > 0:
                await asyncio.sleep(delay)
            sent = due or time.perf_counter()
            writer.write(raw)
            statuses.append(await _answer(reader))
            latencies.append(time.perf_counter() - sent)
    finally:
        writer.close()


async def send(requests: list[bytes], host: str, port: int, concurrency: int, rate: float = 0) -> dict[str, Any]:
    """Send every request with `concurrency` connections, as fast as they go or `rate` per second (open
    loop); seconds taken, 2xx count and each request's latency (seconds, in the order answered)."""
    statuses: list[int] = []
    latencies: list[float] = []
    started, started_at = time.perf_counter(), time.time()
    connections = await asyncio.gather(*(asyncio.open_connection(host, port) for _ in range(concurrency)))
    # one iterator: each request goes out once, on whichever connection is free
    first = time.perf_counter()
    shared = iter([(first + i / rate if rate else 0.0, raw) for i, raw in enumerate(requests)])
    await asyncio.gather(*(_worker(c, shared, statuses, latencies) for c in connections))
    seconds = time.perf_counter() - started
    ok = sum(1 for s in statuses if 200 <= s < 300)
    return {"seconds": seconds, "started_at": started_at, "ok": ok, "answered": len(statuses), "latencies": latencies}


def main(argv: list[str]) -> int:
    path, host, port, concurrency, *rate = argv
    requests = [r for r in Path(path).read_bytes().split(b"\0") if r]
    result = asyncio.run(send(requests, host, int(port), int(concurrency), float(rate[0]) if rate else 0))
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
