"""Stopping asyncio tasks for sure.

Owns: `cancel_all`, the one way the controller stops what it started, and `run_together`. A single
`Task.cancel()` is not enough on Python 3.11: `asyncio.wait_for`, which redis-py wraps around every
socket write when a socket timeout is set, returns the inner result and drops a cancellation that
arrives as the inner call completes (CPython gh-86296, fixed in 3.12). One dropped cancellation must not
hang a shutdown until the kubelet's SIGKILL, so a task that is still running is cancelled again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

RETRY = 0.5  # seconds between cancellations of a task that is still running


async def cancel_all(tasks: Iterable[asyncio.Task[object]], *, retry: float = RETRY) -> None:
    """Cancel `tasks` and return once every one has ended, cancelling again each `retry` seconds.

    Cancelling the caller meanwhile does not abandon the tasks: the caller's cancellation is raised once
    they have all ended. Their results and exceptions are theirs; none is raised here.
    """
    pending = {t for t in tasks if not t.done()}
    interrupted = False
    while pending:
        for task in pending:
            task.cancel()
        try:
            await asyncio.wait(pending, timeout=retry)
        except asyncio.CancelledError:
            interrupted = True
        pending = {t for t in pending if not t.done()}
    if interrupted:
        raise asyncio.CancelledError


async def run_together(
    tasks: list[asyncio.Task[None]], *, what: str, also: Callable[[], Iterable[asyncio.Task[object]]] = tuple
) -> None:
    """Run tasks that are meant to run until cancelled. The first to end raises (its own error, or a
    RuntimeError naming it); either way all of them, and every task `also` names, have ended when this
    returns or raises: `also` is asked again once they ended, since a task that dropped a cancellation
    (see above) may have started another (a group's pass) before its next one arrived."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()
        raise RuntimeError(f"{what} task {next(iter(done)).get_name()} ended")
    finally:
        await cancel_all([*tasks, *also()])
        while left := [t for t in also() if not t.done()]:
            await cancel_all(left)
