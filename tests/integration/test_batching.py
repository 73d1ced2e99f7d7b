"""batching.ScriptBatch on fakeredis and on a real redis-server: concurrent calls share round trips, and
each caller still gets its own reply or its own error."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from tests.jobs import model
from tests.redis_server import free_port
from webhook_scaler.store.batching import ScriptBatch
from webhook_scaler.store.jobs.model import JobUpdate
from webhook_scaler.store.jobs.records import JobStore, Outcome

ECHO = """
if ARGV[1] == 'boom' then return redis.error_reply('boom') end
redis.call('INCR', KEYS[1])
return ARGV[1]
"""


class Counting:
    """Counts the pipelined round trips a ScriptBatch makes."""

    def __init__(self, batch: ScriptBatch) -> None:
        self.trips = 0
        original = batch._evalsha_all

        async def counted(calls: Any) -> list[Any]:
            self.trips += 1
            return await original(calls)

        batch._evalsha_all = counted  # type: ignore[method-assign,assignment]


async def test_concurrent_calls_share_one_round_trip_and_get_their_own_replies(redis: Redis) -> None:
    batch = ScriptBatch(redis, ECHO)
    counting = Counting(batch)
    assert await batch(keys=["{t}:n"], args=["alone"]) == b"alone"  # a lone call: a plain EVALSHA (loads it)
    assert counting.trips == 0
    replies = await asyncio.gather(*(batch(keys=["{t}:n"], args=[f"v{i}"]) for i in range(30)))
    assert [bytes(r).decode() for r in replies] == [f"v{i}" for i in range(30)]
    assert counting.trips == 1
    assert int(await redis.get("{t}:n") or 0) == 31


async def test_an_error_reaches_only_its_own_caller(redis: Redis) -> None:
    batch = ScriptBatch(redis, ECHO)
    results = await asyncio.gather(
        *(batch(keys=["{t}:n"], args=["boom" if i == 3 else str(i)]) for i in range(6)), return_exceptions=True
    )
    assert isinstance(results[3], ResponseError)
    assert [r for i, r in enumerate(results) if i != 3] == [str(i).encode() for i in range(6) if i != 3]
    assert int(await redis.get("{t}:n") or 0) == 5


async def test_a_flushed_script_cache_is_reloaded_for_a_batch(redis: Redis) -> None:
    batch = ScriptBatch(redis, ECHO)
    await redis.script_flush()
    replies = await asyncio.gather(*(batch(keys=["{t}:n"], args=[str(i)]) for i in range(5)))
    assert replies == [str(i).encode() for i in range(5)]
    assert int(await redis.get("{t}:n") or 0) == 5  # each ran exactly once


async def test_concurrent_records_of_one_delivery_apply_once(redis: Redis) -> None:
    store = JobStore(redis)
    update = JobUpdate.from_payload(model("queued"))
    results = await asyncio.gather(*(store.record(update, delivery_id="same") for _ in range(8)))
    assert sorted(r.outcome for r in results) == [Outcome.APPLIED] + [Outcome.DUPLICATE] * 7


async def test_redis_down_fails_every_caller_of_the_batch() -> None:
    client = Redis(port=free_port(), socket_connect_timeout=1, socket_timeout=1)
    batch = ScriptBatch(client, ECHO)
    results = await asyncio.gather(*(batch(keys=["{t}:n"], args=["x"]) for _ in range(4)), return_exceptions=True)
    assert all(isinstance(r, RedisConnectionError | OSError) for r in results), results
    await client.aclose()


@pytest.mark.parametrize("count", [1, 2])
async def test_a_caller_that_went_away_does_not_break_the_others(redis: Redis, count: int) -> None:
    batch = ScriptBatch(redis, ECHO)
    gone = asyncio.ensure_future(batch(keys=["{t}:n"], args=["gone"]))
    others = [asyncio.ensure_future(batch(keys=["{t}:n"], args=[str(i)])) for i in range(count)]
    await asyncio.sleep(0)
    gone.cancel()
    assert await asyncio.gather(*others) == [str(i).encode() for i in range(count)]
