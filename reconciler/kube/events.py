"""Pure: the core/v1 Events the controller records on a RunnerGroup, and the `FailedCreate` Events the
Job controller records on a runner Job whose Pod the API server refused (see `admission`)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from reconciler.kube.crd import GROUP, VERSION
from reconciler.kube.manifests import GroupRef

COMPONENT = "gitea-runner-scaler"
# Why a Secret of the install (named in GRS_PROTECTED_SECRETS, or made by us) is refused to a group.
PROTECTED_SECRET = "is the install's own: a RunnerGroup may not use it"  # noqa: S105 (a message)
# What the Job controller lists of the Events it records when a Pod of a Job cannot be created.
FAILED_CREATE_SELECTOR = "involvedObject.kind=Job,reason=FailedCreate"


def event_body(group: GroupRef, *, kind: str, reason: str, message: str, now: datetime) -> dict[str, Any]:
    """A new Event on the RunnerGroup (`kind`: Normal or Warning)."""
    return {
        "metadata": {"name": f"{group.name}.{uuid.uuid4().hex[:16]}", "namespace": group.namespace},
        "involvedObject": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RunnerGroup",
            "name": group.name,
            "namespace": group.namespace,
            "uid": group.uid,
        },
        "type": kind,
        "reason": reason,
        "message": message[:1000],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": now.isoformat(),
        "lastTimestamp": now.isoformat(),
        "count": 1,
    }


def refusals(events: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The latest `FailedCreate` message of each Job (by uid) among listed Events."""
    latest: dict[str, tuple[str, str]] = {}
    for event in events:
        uid = (event.get("involvedObject") or {}).get("uid") or ""
        if event.get("reason") != "FailedCreate" or not uid:
            continue
        when = str(event.get("lastTimestamp") or event.get("eventTime") or "")
        if uid not in latest or when >= latest[uid][0]:
            latest[uid] = (when, str(event.get("message") or ""))
    return {uid: message for uid, (_, message) in latest.items()}
