"""What can wait behind the creates: `RunnerCreated` Events, gathered per group, and status writes
that only change counts, so that in a burst the API server gets the runner Jobs first.

Owns: counting the creates in flight across every group's pass (`creating`); the pending
`RunnerCreated` Events, one per group for every runner created since its last one; and the groups
whose count-only status write was put off (`later`). One background task waits until no create is in
flight, then lets those groups pass again (one wake-up for all, no timer per group) and sends a few
Events, and waits again; while creates go on without a pause, it does all of that every `MAX_DELAY`.
An Event is a report, never a decision: one lost with its replica costs nothing but the Event (the
log has every runner created).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from reconciler.decide.status import pass_fields
from reconciler.kube.api import Kube
from reconciler.kube.manifests import GroupRef
from reconciler.kube.objects import GroupObject
from reconciler.loop.state import GroupState

MAX_DELAY = 10.0  # seconds an Event or a count-only status write waits at most for the creates
STATUS_INTERVAL = 1.0  # seconds between status writes that only change counts
SENDS_IN_FLIGHT = 8  # Events sent at once, between checks for creates in flight


class Reports:
    """The creates in flight of one controller, and the Events waiting for them to end."""

    def __init__(self, kube: Kube, keep: Callable[[asyncio.Task[None]], None], wake: Callable[[], None]) -> None:
        self.kube = kube
        self.keep = keep  # keeps a background task until it ends (the controller awaits it at exit)
        self.wake = wake  # starts a round of passes
        self.creating = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._created: dict[str, tuple[GroupRef, list[str]]] = {}  # group uid -> (group, job ids or "warm")
        self._later: list[GroupState] = []
        self._task: asyncio.Task[None] | None = None

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
        self._start()

    def later(self, state: GroupState) -> None:
        """A group's count-only status write waits for the creates in flight: its next pass comes then."""
        self._later.append(state)
        self._start()

    async def write_status(
        self,
        group: GroupObject,
        status: dict[str, Any],
        state: GroupState,
        *,
        wake_at: Callable[[GroupState, int], None],
        now: float,
    ) -> None:
        """Write a changed status; while only the counts change, at most once per STATUS_INTERVAL, and not
        while creates are in flight (up to MAX_DELAY), so a burst of runners does not turn into a burst
        of status writes ahead of its creates (a wake-up writes the last one). `wake_at`: look at the
        group again then (ms of the clock `now` is read from)."""
        previous = pass_fields(group.status)
        if status == previous:
            state.status_put_off = 0.0
            return
        mono = time.monotonic()
        since = mono - state.status_written
        counts_only = all(status.get(k) == previous.get(k) for k in ("conditions", "observedGeneration", "target"))
        if counts_only:
            state.status_put_off = state.status_put_off or mono
            if since < STATUS_INTERVAL:
                wake_at(state, int((now + STATUS_INTERVAL - since) * 1000))
                return
            if self.creating and mono - state.status_put_off < MAX_DELAY:
                self.later(state)
                return
        await self.kube.patch_status(group.ref, status)
        state.status_written, state.status_put_off = time.monotonic(), 0.0

    def _start(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._when_idle(), name="reports")
            self.keep(self._task)

    async def _when_idle(self) -> None:
        """Each time no create is in flight: let the groups put off pass again, and send a few Events.
        Creates in flight all along: all of that every MAX_DELAY."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + MAX_DELAY
        while self._created or self._later:
            try:
                await asyncio.wait_for(self._idle.wait(), max(0.0, deadline - loop.time()))
                some = SENDS_IN_FLIGHT
            except TimeoutError:
                some, deadline = len(self._created), loop.time() + MAX_DELAY
            if self._later:
                for state in self._later:
                    state.due = True
                self._later = []
                self.wake()
            for _ in range(0, some, SENDS_IN_FLIGHT):
                await self._send_some(SENDS_IN_FLIGHT)

    async def _send_some(self, count: int) -> None:
        some = list(self._created)[:count]
        await asyncio.gather(*(self._send(*self._created.pop(uid)) for uid in some))

    async def _send(self, group: GroupRef, ids: list[str]) -> None:
        message = f"Created {len(ids)} runner(s) for jobs: {', '.join(ids)}"
        await self.kube.event(group, kind="Normal", reason="RunnerCreated", message=message[:1000])
