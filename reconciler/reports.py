"""What can wait behind the creates: `RunnerCreated` Events, gathered per group, sent when no create is
in flight, so that in a burst the API server gets the runner Jobs first.

Owns: counting the creates in flight across every group's pass (`creating`), and the pending
`RunnerCreated` Events: one per group for every runner created since its last one, sent by one
background task once no create is in flight, or `MAX_DELAY` after the first was gathered. The count
also lets a pass put off a status write that only changes counts (see `apply.GroupPass.write_status`).
An Event is a report, never a decision: one lost with its replica costs nothing but the Event (the log
has every runner created).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from reconciler.kube import Kube
from reconciler.manifests import GroupRef

MAX_DELAY = 10.0  # seconds an Event or a count-only status write waits at most for the creates
SENDS_IN_FLIGHT = 8  # Events sent at once by a flush


class Reports:
    """The creates in flight of one controller, and the Events waiting for them to end."""

    def __init__(self, kube: Kube, keep: Callable[[asyncio.Task[None]], None]) -> None:
        self.kube = kube
        self.keep = keep  # keeps a background task until it ends (the controller awaits it at exit)
        self.creating = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._created: dict[str, tuple[GroupRef, list[str]]] = {}  # group uid -> (group, job ids or "warm")
        self._flush: asyncio.Task[None] | None = None

    @contextmanager
    def creates(self) -> Iterator[None]:
        """Count a pass's creates as in flight while the block runs."""
        self.creating += 1
        self._idle.clear()
        try:
            yield
        finally:
            self.creating -= 1
            if not self.creating:
                self._idle.set()

    def created(self, group: GroupRef, ids: list[str]) -> None:
        """Runners were created for `group` (their job ids, or "warm"): one Event will say so."""
        self._created.setdefault(group.uid, (group, []))[1].extend(ids)
        if self._flush is None or self._flush.done():
            self._flush = asyncio.create_task(self._send_when_idle(), name="runner-created-events")
            self.keep(self._flush)

    async def _send_when_idle(self) -> None:
        with suppress(TimeoutError):  # a long burst: the Events go after MAX_DELAY anyway
            await asyncio.wait_for(self._idle.wait(), MAX_DELAY)
        await self.flush()

    async def flush(self) -> None:
        """Send every pending Event now (`SENDS_IN_FLIGHT` at a time)."""
        pending, self._created = list(self._created.values()), {}
        for start in range(0, len(pending), SENDS_IN_FLIGHT):
            await asyncio.gather(*(self._send(group, ids) for group, ids in pending[start : start + SENDS_IN_FLIGHT]))

    async def _send(self, group: GroupRef, ids: list[str]) -> None:
        message = f"Created {len(ids)} runner(s) for jobs: {', '.join(ids)}"
        await self.kube.event(group, kind="Normal", reason="RunnerCreated", message=message[:1000])
