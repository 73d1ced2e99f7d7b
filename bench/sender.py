"""A light concurrent sender, run as its own process: `python -m bench.sender FILE HOST PORT CONCURRENCY`.

Sends the raw HTTP requests in FILE (NUL-separated, pre-built and pre-signed by the bench) over
CONCURRENCY keep-alive connections, each one request after another, and prints one JSON line: the
seconds from the first connect to the last answer, and how many answers were 2xx. Plain asyncio
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


async def _worker(host: str, port: int, requests: Iterator[bytes], statuses: list[int]) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        for raw in requests:
            writer.write(raw)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head.split(b" ", 2)[1])
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            statuses.append(status)
    finally:
        writer.close()


async def send(requests: list[bytes], host: str, port: int, concurrency: int) -> dict[str, float]:
    """Send every request with `concurrency` connections; seconds taken and 2xx count."""
    statuses: list[int] = []
    shared = iter(requests)  # one iterator: each request goes out once, on whichever connection is free
    started = time.perf_counter()
    await asyncio.gather(*(_worker(host, port, shared, statuses) for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "ok": sum(1 for s in statuses if 200 <= s < 300), "answered": len(statuses)}


def main(argv: list[str]) -> int:
    path, host, port, concurrency = argv
    requests = [r for r in Path(path).read_bytes().split(b"\0") if r]
    print(json.dumps(asyncio.run(send(requests, host, int(port), int(concurrency)))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
