"""`reconciler check`: whether each RunnerGroup the reconciler serves works, in plain lines.

Owns: reading a group's status as the controller writes it (`decide/status.py`: `Ready` and the
conditions behind it) into one line a person reads (`lines`, pure), and the small command around it:
list the groups through the Kubernetes API, wait up to `--wait` seconds for them to become Ready, print,
and exit 0 (every group Ready), 1 (not, or no group) or 2 (the API could not be asked). Must not change
anything in the cluster, nor print a token (it reads no Secret).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.kube.api import Kube, api_client, classify
from reconciler.kube.crd import GROUP, PLURAL, VERSION
from reconciler.settings import Settings
from webhook_scaler.config import ConfigError, load

PROGRAM = "reconciler check"
ALL_READY, NOT_READY, API_ERROR = 0, 1, 2


@dataclass(frozen=True, slots=True)
class Verdict:
    """What `check` says of one group: its lines, and whether it is Ready."""

    ready: bool
    lines: tuple[str, ...]


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = status.get("conditions") or []
    return {str(c.get("type")): c for c in found if isinstance(c, Mapping)}


def _said(condition: Mapping[str, Any]) -> str:
    return f"{condition.get('reason') or 'NoReason'}: {condition.get('message') or ''}".rstrip(": ")


def _where(spec: Mapping[str, Any], status: Mapping[str, Any]) -> str:
    """The group's scope in words, as `ScopeProven` names it: `org acme`, `the instance (global)`."""
    scope = str(spec.get("scope") or "?")
    if scope == "global":
        return "the instance (global)"
    return f"{scope} {status.get('target') or spec.get(scope) or '?'}"


def _gitea_url(spec: Mapping[str, Any]) -> str:
    gitea = spec.get("gitea")
    return str((gitea.get("url") if isinstance(gitea, Mapping) else None) or spec.get("giteaURL") or "?")


def _summary(spec: Mapping[str, Any], status: Mapping[str, Any], found: Mapping[str, Mapping[str, Any]]) -> str:
    """The one line of a Ready group: each condition that holds, in words."""
    reach = found.get("GiteaReachable") or {}
    url = _gitea_url(spec)
    if reach.get("status") == "True":
        parts = [f"Gitea {url} reachable"]
    elif reach.get("reason") == "NotPolledYet":
        parts = [f"Gitea {url} not polled yet"]
    else:
        parts = [f"Gitea {url} not answering yet ({_said(reach)})" if reach else f"Gitea {url} not polled yet"]
    if (found.get("ScopeProven") or {}).get("status") == "True":
        parts.append(f"token proves {_where(spec, status)}")
    if (found.get("RunnersAdmitted") or {}).get("status") == "True":
        parts.append("runners admitted")
    if (found.get("WebhookInstalled") or {}).get("status") == "True":
        parts.append("webhook installed")
    ready = found["Ready"]
    parts.append("Ready (suspended: no new runners are started)" if ready.get("reason") == "Suspended" else "Ready")
    return "; ".join(parts)


def _others(found: Mapping[str, Mapping[str, Any]], *, named: str, shown: tuple[str, ...]) -> list[str]:
    """A line for each condition but Ready whose status is not one `shown` already says, unless Ready's
    message is already its own."""
    out = []
    for kind, c in found.items():
        if kind in ("Ready", named) or c.get("status") in shown:
            continue
        out.append(f"{kind} {c.get('status')}: {_said(c)}")
    return out


def verdict(group: Mapping[str, Any]) -> Verdict:
    """What `check` prints of one group (a RunnerGroup object as the API returns it), and whether it is Ready."""
    meta = group.get("metadata") or {}
    name = f"{meta.get('namespace')}/{meta.get('name')}"
    spec, status = group.get("spec") or {}, group.get("status") or {}
    found = _conditions(status)
    ready = found.get("Ready")
    if ready is None:
        why = (
            "no status yet: the reconciler has not served this group (is it running, and does it serve this namespace?)"
        )
        return Verdict(False, (f"{name}: NOT READY: {why}",))
    generation, seen = meta.get("generation"), ready.get("observedGeneration", status.get("observedGeneration"))
    if isinstance(generation, int) and isinstance(seen, int) and seen < generation:
        why = (
            f"the status is of generation {seen} and the group is at {generation}: the reconciler has not served"
            " its last change yet (is it running?)"
        )
        return Verdict(False, (f"{name}: NOT READY: {why}",))
    if ready.get("status") == "True":
        extra = [f"{name}: {line}" for line in _others(found, named="", shown=("True", "Unknown"))]
        return Verdict(True, (f"{name}: {_summary(spec, status, found)}", *extra))
    named = str(ready.get("message") or "").partition(":")[0]  # `_ready` starts with the blocking type
    lines = [
        f"{name}: NOT READY: {_said(ready)}",
        *(f"{name}: {line}" for line in _others(found, named=named, shown=("True",))),
    ]
    return Verdict(False, tuple(lines))


def report(groups: Sequence[Mapping[str, Any]], *, namespaces: Sequence[str]) -> tuple[int, list[str]]:
    """The exit status and every line for these groups (all the namespaces' when `namespaces` is empty)."""
    if not groups:
        where = f"namespace(s) {', '.join(namespaces)}" if namespaces else "any namespace"
        return NOT_READY, [f"no RunnerGroup in {where}: create one (docs/runnergroups.md)"]
    verdicts = [verdict(g) for g in sorted(groups, key=_key)]
    ready = sum(v.ready for v in verdicts)
    lines = [line for v in verdicts for line in v.lines]
    lines.append(f"{ready} of {len(verdicts)} RunnerGroup(s) Ready")
    return (ALL_READY if ready == len(verdicts) else NOT_READY), lines


def _key(group: Mapping[str, Any]) -> tuple[str, str]:
    meta = group.get("metadata") or {}
    return str(meta.get("namespace")), str(meta.get("name"))


class ApiProblem(Exception):
    """The Kubernetes API could not be asked; the message says where and why, never a credential."""


def _why(exc: BaseException) -> str:
    """An API failure in words: the API server's answer, or what kept the request from reaching it."""
    said = str(classify(exc))
    return f"{said}: {exc}" if said == type(exc).__name__ and str(exc) else said


async def list_groups(kube: Kube, namespaces: Iterable[str]) -> list[Mapping[str, Any]]:
    """Every RunnerGroup in `namespaces` (all namespaces when none is named)."""
    named = list(namespaces)
    out: list[Mapping[str, Any]] = []
    for ns in named or [""]:
        try:
            if ns:
                answer = await kube.custom.list_namespaced_custom_object(GROUP, VERSION, ns, PLURAL)
            else:
                answer = await kube.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        except Exception as exc:
            where = f"namespace {ns}" if ns else "all namespaces"
            raise ApiProblem(f"cannot list the RunnerGroups in {where}: {_why(exc)}") from None
        out.extend(answer.get("items") or [])
    return out


async def check(kube: Kube, *, namespaces: Sequence[str], wait: float) -> tuple[int, list[str]]:
    """Read the groups until all are Ready or `wait` seconds have passed (polling once a second)."""
    deadline = time.monotonic() + wait
    told = False
    while True:
        code, lines = report(await list_groups(kube, namespaces), namespaces=namespaces)
        left = deadline - time.monotonic()
        if code == ALL_READY or left <= 0:
            return code, lines
        if not told:
            print(f"{PROGRAM}: waiting up to {wait:g} s for every RunnerGroup to be Ready", file=sys.stderr, flush=True)
            told = True
        await asyncio.sleep(min(1.0, left))


def parser() -> argparse.ArgumentParser:
    """`reconciler check`'s own arguments."""
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description=(
            "Say whether each RunnerGroup the reconciler serves works: Gitea reachable and new enough, the API"
            " token's scope proven, runners admitted, Ready. Exit 0 when every group is Ready, 1 when one is"
            " not (or there is none), 2 when the Kubernetes API cannot be asked. Reads GRS_WATCH_NAMESPACE and"
            " GRS_KUBECONFIG as the reconciler does."
        ),
        allow_abbrev=False,
    )
    parser.add_argument(
        "--namespace", "-n", action="append", default=[], help="a namespace to check (repeatable); default: served"
    )
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS", help="wait this long for Ready")
    return parser


async def _run(settings: Settings, *, namespaces: Sequence[str], wait: float) -> tuple[int, list[str]]:
    try:
        api = await api_client(settings.kubeconfig)
    except Exception as exc:
        path = settings.kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
        where = "in-cluster" if os.environ.get("KUBERNETES_SERVICE_HOST") and not settings.kubeconfig else path
        raise ApiProblem(f"cannot load the Kubernetes configuration ({where}): {exc}") from None
    try:
        return await check(Kube(api), namespaces=namespaces, wait=wait)
    finally:
        await api.close()


def main(argv: Sequence[str]) -> int:
    """Run `reconciler check` with these arguments; the exit status."""
    args = parser().parse_args(argv)
    if args.wait < 0:
        parser().error("--wait: SECONDS must not be negative")
    try:
        settings = load(Settings)
    except ConfigError as exc:
        for line in str(exc).splitlines():
            print(f"{PROGRAM}: invalid setting: {line}", file=sys.stderr)
        return API_ERROR
    namespaces = tuple(dict.fromkeys(args.namespace)) or settings.namespaces
    try:
        code, lines = asyncio.run(_run(settings, namespaces=namespaces, wait=args.wait))
    except ApiProblem as exc:
        print(f"{PROGRAM}: {exc}", file=sys.stderr)
        return API_ERROR
    print("\n".join(lines), flush=True)
    return code
