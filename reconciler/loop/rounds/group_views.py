"""The RunnerGroups as a round sees them, each a failure domain of its own.

Owns: validating each group's spec (the model, the podTemplate's shape against the API server's own
schema, the install's runner Pod policy), once per generation; the default-instance rule across
groups (`instances`); and `contained`, the one way an exception that one group's objects raised is
kept to that group: logged with its namespace and name, counted in `grs_group_faults`, and turned into
a message for its status. Nothing a group brings may stop the round, the poll or the sweep of another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from reconciler.decide.instances import View, one_instance
from reconciler.kube import openapi
from reconciler.kube.api import Kube
from reconciler.kube.objects import GroupObject
from reconciler.kube.pod_schema import PodSchema
from reconciler.kube.runner_policy import RunnerPolicy
from reconciler.metrics import Metrics
from reconciler.model.spec import RunnerGroupSpec
from reconciler.settings import Settings

log = logging.getLogger(__name__)


def contained(metrics: Metrics, group: GroupObject, stage: str, exc: BaseException) -> str:
    """Log and count an exception of one group's `stage` (validate, round, poll, sweep); what its status says."""
    label = f"{group.namespace}/{group.name}"
    metrics.group_faults.labels(group=label, stage=stage).inc()
    extra = {"group": group.name, "namespace": group.namespace, "stage": stage, "error": repr(exc)[:500]}
    log.error("a group's objects raised; kept to that group", extra=extra, exc_info=exc)
    return f"the controller failed on this group ({stage}): {type(exc).__name__}: {str(exc)[:300]}"


class GroupViews:
    """Every group of the cache with its validated spec, or None and why."""

    def __init__(self, settings: Settings, *, metrics: Metrics, groups: Callable[[], Iterable[GroupObject]]) -> None:
        self.settings = settings
        self.metrics = metrics
        self.groups = groups
        self.policy = settings.runner_policy  # settings do not change while the process runs: built once
        self.pod_schema = openapi.shipped_pod_schema()  # the API server's once read (`read_schema`)
        self.schema_from_server = False
        self._specs: dict[str, tuple[int, RunnerGroupSpec | None, str]] = {}
        self.schema_tried = asyncio.Event()

    async def read_schema(self, kube: Kube, wake: Callable[[], None]) -> None:
        """Read the API server's pod schema (`openapi`) until it is read, then wait to be cancelled, as every
        worker of the controller; `schema_tried` is set after the first try (the first round waits for it)."""
        delay = self.settings.retry_initial
        while not self.schema_from_server:
            try:
                self.schema_read(await openapi.pod_schema(kube))
                self.schema_from_server = True
                wake()
            except Exception as exc:
                log.warning(
                    "the API server's pod schema unavailable; the shipped one holds", extra={"error": repr(exc)}
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.settings.retry_max)
            finally:
                self.schema_tried.set()
        await asyncio.Future()

    def schema_read(self, schema: PodSchema) -> None:
        """Use the API server's pod schema from now on: every group is validated again."""
        self.pod_schema = schema
        self._specs.clear()

    def __call__(self) -> list[View[GroupObject]]:
        """Every group with its validated spec (once per generation: the API server bumps it on every spec
        change), or None and why; a group of a Gitea the install does not serve is refused (`instances`)."""
        out: list[View[GroupObject]] = []
        seen: set[str] = set()
        for group in self.groups():
            seen.add(group.uid)
            cached = self._specs.get(group.uid)
            if cached is None or cached[0] != group.generation:
                cached = (group.generation, *self._validated(group, self.policy))
                self._specs[group.uid] = cached
            out.append((group, cached[1], cached[2]))
        for uid in set(self._specs) - seen:
            del self._specs[uid]
        return one_instance(out, default=self.settings.default_gitea, named=self.settings.instances)

    def _validated(self, group: GroupObject, policy: RunnerPolicy) -> tuple[RunnerGroupSpec | None, str]:
        try:
            return validate(group.spec, policy, self.pod_schema)
        except Exception as exc:  # a spec no check foresaw: this group's problem alone
            return None, contained(self.metrics, group, "validate", exc)


def validate(
    spec: Mapping[str, Any], policy: RunnerPolicy | None = None, schema: PodSchema | None = None
) -> tuple[RunnerGroupSpec | None, str]:
    """A spec validated (its podTemplate held to `schema`, and all of it to the runner Pod `policy`), or
    None and what is wrong with it."""
    try:
        valid = RunnerGroupSpec.model_validate(dict(spec))
    except ValidationError as exc:
        problems = "; ".join(
            f"spec.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" if e["loc"] else e["msg"]
            for e in exc.errors(include_input=False)
        )
        return None, problems
    if schema is not None and valid.pod_template is not None:
        shape = schema.problems(valid.pod_template)
        if shape:
            return None, "; ".join(shape)
    refused = policy.violations(valid) if policy else []
    return (None, "; ".join(refused)) if refused else (valid, "")
