"""`python -m reconciler.crd_apply`: bring the cluster's RunnerGroup CRD up to this version's.

Helm installs a chart's `crds/` when a release is first installed and never again, so `helm upgrade`
alone would leave new fields unserved (the API server drops them from every status the reconciler
writes). The chart runs this as a pre-install and pre-upgrade hook Job, before the new reconciler
starts: it applies `crd.crd()` (server-side apply, this program's field manager, taking over the
fields Helm wrote), marked with the version that applied it. A CRD marked by a newer version is left
as it is, so an older install sharing the cluster never takes fields away from a newer one. Exit 0
when the CRD is current (applied, or newer), 1 on an API error.
"""

from __future__ import annotations

import asyncio
import logging
import re
import sys
from collections.abc import Sequence
from typing import Any, cast

from reconciler.kube.api import Kube, PermanentError, TransientError, api_client, classify
from reconciler.kube.crd import crd
from webhook_scaler import logs
from webhook_scaler.config import version

log = logging.getLogger("reconciler.crd_apply")
VERSION_ANNOTATION = "gitea.bpg.pw/applied-by-version"
FIELD_MANAGER = "gitea-runner-scaler"
ATTEMPTS = 5


def release(text: str) -> tuple[int, ...] | None:
    """A version's release numbers (`0.10.2-rc1` -> (0, 10, 2)), or None if it has none."""
    match = re.match(r"v?(\d+(?:\.\d+)*)", text or "")
    return tuple(int(n) for n in match.group(1).split(".")) if match else None


def wanted(ours: str) -> dict[str, Any]:
    """The CRD this version serves, marked as applied by `ours`."""
    body = crd()
    body["metadata"]["annotations"] = {VERSION_ANNOTATION: ours}
    return body


async def apply(kube: Kube, ours: str) -> str:
    """Apply this version's CRD unless a newer version's is there: what was done, for the log."""
    body = wanted(ours)
    name, api = body["metadata"]["name"], cast(Any, kube.extensions)  # its stubs lack `_content_type`
    try:
        current = await api.read_custom_resource_definition(name)
        theirs = (current.metadata.annotations or {}).get(VERSION_ANNOTATION, "")
        if (mine := release(ours)) is not None and (newer := release(theirs)) is not None and newer > mine:
            return f"left as version {theirs} applied it (newer than {ours})"
        await api.patch_custom_resource_definition(
            name,
            body,
            field_manager=FIELD_MANAGER,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
    except Exception as exc:  # every API failure, classified (see `classify`)
        raise classify(exc) from None
    return f"applied (version {ours})"


async def run(*, kubeconfig: str | None = None, ours: str | None = None) -> str:
    """Apply with a few retries of transient errors; the outcome."""
    api = await api_client(kubeconfig)
    try:
        kube = Kube(api)
        for attempt in range(1, ATTEMPTS + 1):
            try:
                return await apply(kube, ours or version())
            except TransientError as exc:
                if attempt == ATTEMPTS:
                    raise
                log.warning("CRD not applied yet", extra={"error": str(exc)})
                await asyncio.sleep(attempt)
        raise AssertionError("unreachable")
    finally:
        await api.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; exit 0 when the CRD is current, 1 on an API error, 2 on arguments."""
    logs.setup(level="INFO", fmt="json")
    if list(sys.argv[1:] if argv is None else argv):
        print("reconciler.crd_apply: takes no arguments", file=sys.stderr)
        return 2
    try:
        outcome = asyncio.run(run())
    except (PermanentError, TransientError) as exc:
        print(f"reconciler.crd_apply: {exc}", file=sys.stderr)
        return 1
    log.info("RunnerGroup CRD", extra={"outcome": outcome})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
