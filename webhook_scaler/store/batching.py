"""Coalescing concurrent runs of one Lua script into one pipelined round trip to Redis.

Owns: `ScriptBatch`, a drop-in for redis-py's registered script (`await batch(keys=..., args=...)`).
The calls made while the event loop runs one round (every request handler that got its body in that
round) go out together on one connection, as one write, and their replies come back in one read:
redis-py's per-call cost (taking a pooled connection, its health check, the retry wrapper, a socket
write and a wake-up per reply) is paid once per round instead of once per delivery. Each call still
runs its own script, atomically, and each caller gets its own reply or its own error, only once Redis
answered it (with `appendfsync always`, once it is on disk). A lone call goes out at once, as before.
Must not know what the script does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import NoScriptError

_Call = tuple[Sequence[Any], Sequence[Any], "asyncio.Future[Any]"]


class ScriptBatch:
    """One Lua script whose concurrent calls share round trips (see the module doc)."""

    def __init__(self, redis: Redis, script: str) -> None:
        self.redis = redis
        self.script = redis.register_script(script)
        self._pending: list[_Call] = []
        self._tasks: set[asyncio.Task[None]] = set()

    async def __call__(self, *, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """The script's reply for these keys and arguments; raises what Redis or the connection raised."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._pending:  # the first call of this round: send once the round's handlers have run
            loop.call_soon(self._flush)
        self._pending.append((keys, args, future))
        return await future

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            if len(batch) == 1:
                keys, args, _ = batch[0]
                replies: list[Any] = [await self.script(keys=keys, args=args)]
            else:
                replies = await self._pipelined(batch)
        except BaseException as exc:  # the round trip failed: every caller gets the error
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, _, future), reply in zip(batch, replies, strict=True):
            if future.done():  # its caller went away
                continue
            if isinstance(reply, Exception):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def _pipelined(self, batch: list[_Call]) -> list[Any]:
        """Every call's reply (or error) in order; loads the script once if Redis does not have it."""
        replies = await self._evalsha_all(batch)
        missing = [i for i, reply in enumerate(replies) if isinstance(reply, NoScriptError)]
        if missing:  # a restarted or flushed Redis: NOSCRIPT means the call did not run
            self.script.sha = await self.redis.script_load(self.script.script)
            again = await self._evalsha_all([batch[i] for i in missing])
            for i, reply in zip(missing, again, strict=True):
                replies[i] = reply
        return replies

    async def _evalsha_all(self, batch: list[_Call]) -> list[Any]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for keys, args, _ in batch:
                pipe.execute_command("EVALSHA", self.script.sha, len(keys), *keys, *args)
            replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies
