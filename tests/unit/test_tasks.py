"""cancel_all: a dropped cancellation does not leave a task running, and the caller waits for the end."""

from __future__ import annotations

import asyncio
import sys

import pytest

from reconciler.tasks import cancel_all


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
