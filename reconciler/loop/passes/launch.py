"""Sending a runner's create: its Job and its credential, with its registration before or beside them.

Owns: the Job of a runner registered already, then its credential (`after`); the Job created while its
runner registers, then its credential (`beside`: a Pod whose credential Secret does not exist yet
waits for its volume, and never starts a runner without one); a Job deleted again when its runner's
Register or its credential failed. Seats and claims are `seating`'s: an error says what it left (see
`beside`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from reconciler.kube.api import Kube, PermanentError, TransientError
from reconciler.loop.passes.registrations import Registrations
from reconciler.model.spec import RunnerGroupSpec


class Launch:
    """Creates runner Jobs and hands them their credentials, for one controller."""

    def __init__(self, kube: Kube, registrations: Registrations) -> None:
        self.kube = kube
        self.registrations = registrations

    async def after(self, body: dict[str, Any], file: str) -> bool:
        """Create the Job of a runner registered already (`file`: its `.runner`), then its credential:
        True if created, False if there is one of its name (409)."""
        uid = await self.kube.create_job(body)
        if uid:
            await self.hand_over(body, uid, file)
        return uid is not None

    async def beside(self, namespace: str, spec: RunnerGroupSpec, runner: str, body: dict[str, Any]) -> bool:
        """Create the Job while its runner registers, then its credential (as `after`). A Register that
        fails deletes the Job (its Pod never had a credential to run with), and the error passes on as
        it came once the Job is gone, or as a plain TransientError (nothing said to be undone: the seat
        stays) if it could not be deleted; its pendingTimeout reaps it then. After a 409 or a create that
        failed, the row the Register made is the ghost sweep's."""
        register = asyncio.ensure_future(self.registrations.register(namespace, spec, runner))
        try:
            uid = await self.kube.create_job(body)
        except BaseException:
            await _settled(register)
            raise
        if uid is None:
            await _settled(register)
            return False
        try:
            file = await register
        except BaseException as exc:
            if await self._deleted(body) or not isinstance(exc, TransientError | PermanentError):
                raise
            raise TransientError(f"{exc}; its runner Job could not be deleted, retried later") from None
        await self.hand_over(body, uid, file)
        return True

    async def hand_over(self, body: Mapping[str, Any], uid: str, file: str) -> None:
        """Give the new runner Job its credential; if that fails, the Job goes (its Pod would wait for the
        Secret until its pending timeout)."""
        try:
            await self.registrations.hand_over(body, uid, file)
        except BaseException:
            with contextlib.suppress(Exception):
                await self._delete(body)
            raise

    async def _deleted(self, body: Mapping[str, Any]) -> bool:
        try:
            await self._delete(body)
        except Exception:
            return False
        return True

    async def _delete(self, body: Mapping[str, Any]) -> None:
        meta = body["metadata"]
        await self.kube.delete_job(meta["namespace"], meta["name"])


async def _settled(register: asyncio.Future[str]) -> None:
    """Wait for a Register whose runner will not run (its row, if any, is the ghost sweep's)."""
    with contextlib.suppress(Exception):
        await register
