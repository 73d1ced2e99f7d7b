"""cancel_all: a dropped cancellation does not leave a task running, and the caller waits for the end."""

from __future__ import annotations

import asyncio
import sys

import pytest

from reconciler.tasks import cancel_all, run_together


async def _drops_cancellations(times: int, ended: list[str]) -> None:
    """Ignore the first `times` cancellations, as Python 3.11's wait_for can (CPython gh-86296)."""
    dropped = 0
    try:
        while True:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                dropped += 1
                if dropped > times:
                    raise
    finally:
        ended.append(f"dropped {dropped - 1}")


async def test_a_task_that_drops_cancellations_is_cancelled_until_it_ends() -> None:
    ended: list[str] = []
    stubborn = asyncio.create_task(_drops_cancellations(2, ended))
    plain = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_all([stubborn, plain], retry=0.01), timeout=10)
    assert stubborn.cancelled() and plain.cancelled()
    assert ended == ["dropped 2"]


async def test_wait_for_as_redis_uses_it_drops_the_cancellation_this_guards_against() -> None:
    """The race itself: the inner call completes in the same loop turn as the cancel."""
    inner: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def send() -> str:
        return await asyncio.wait_for(inner, timeout=5)

    task = asyncio.create_task(send())
    await asyncio.sleep(0)  # task now waits inside wait_for
    inner.set_result("sent")
    task.cancel()
    await asyncio.wait({task}, timeout=5)
    assert task.done()
    if sys.version_info >= (3, 12):
        assert task.cancelled()  # fixed there
    else:
        assert task.result() == "sent"  # the cancellation was dropped: one cancel() did not stop the task


async def test_cancelling_the_caller_still_waits_for_the_tasks() -> None:
    ended: list[str] = []
    stubborn = asyncio.create_task(_drops_cancellations(3, ended))
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_all([stubborn], retry=0.01))
    await asyncio.sleep(0)
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert stubborn.done() and ended == ["dropped 3"]


async def test_finished_tasks_are_left_alone_and_their_errors_not_raised() -> None:
    async def fail() -> None:
        raise ValueError("theirs")

    failed = asyncio.create_task(fail())
    await asyncio.sleep(0)
    await cancel_all([failed])
    assert isinstance(failed.exception(), ValueError)


async def test_a_task_started_by_one_that_dropped_its_cancellation_is_ended_too() -> None:
    """The controller's round drops its cancellation (gh-86296) and starts a group's pass before the next
    one arrives: run_together asks `also` again, so that pass ends before it returns, not after (seen once
    in CI: "a group pass outlived the controller")."""
    passes: list[asyncio.Task[None]] = []
    started = asyncio.Event()

    async def round_() -> None:
        started.set()
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:  # dropped: the round goes on and starts a pass
            passes.append(asyncio.create_task(asyncio.sleep(60)))
            await asyncio.sleep(60)  # ends at the next cancellation

    worker = asyncio.create_task(round_())
    runner = asyncio.create_task(run_together([worker], what="controller", also=lambda: passes))
    await started.wait()
    runner.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(runner, timeout=10)
    assert passes and all(p.done() for p in passes), "the pass outlived run_together"
