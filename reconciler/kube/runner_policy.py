"""Pure: the runner policy the install's admin sets, and what a RunnerGroup's spec asks beyond it.

A RunnerGroup author may not be allowed to create Pods; the runner Pods the controller creates for
them must not give them more than the admin allows. By default a group's `podTemplate` may not use
the host's namespaces (`hostPID`, `hostIPC`, `hostNetwork`), `hostPath` volumes, a service account
(`serviceAccountName`, `automountServiceAccountToken`, projected token volumes), or privileged or
added-capability containers of its own (but the runner container of a dind image), or place its runners
(`_SCHEDULING`: where they run is the admin's, `placement`); the Docker modes
(`containerMode: dind`, a `dind` image), which run privileged, are allowed unless the admin turns
them off. A group that asks more is refused with one message per thing it asked (its status's Ready
condition), and no runner of it is started; so is a podTemplate naming one of the install's own
Secrets (`secret_names`). The chart's ValidatingAdmissionPolicy refuses the same (but the Secret
names) when the group is applied. With `gitea_urls` set, a group's `gitea.url` must be one of them
(or under one): no group makes the reconciler poll with its token, or its runners register,
anywhere else. Must not do I/O.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from reconciler.kube.dind import is_dind
from reconciler.model.spec import RunnerGroupSpec

_HOST_NAMESPACES = ("hostPID", "hostIPC", "hostNetwork")
_ACCOUNT_FIELDS = ("serviceAccountName", "serviceAccount")
_CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
# The PodSpec fields that choose a runner's node or displace other Pods: nodeName (skips the scheduler,
# and with it NoSchedule taints), nodeSelector, affinity (node affinity, and pod affinity: next to another
# tenant's runners), tolerations (onto nodes tainted for others), topologySpreadConstraints (placed by
# other Pods' labels), schedulerName (a scheduler that may ignore all of these), priorityClassName and
# priority (preempting other Pods), runtimeClassName (another runtime, and its RuntimeClass's own
# nodeSelector and tolerations). Not: preemptionPolicy, overhead (the API server sets them from the
# PriorityClass and the RuntimeClass, refusing others), schedulingGates (only holds the Pod back).
_SCHEDULING = (
    "nodeName",
    "nodeSelector",
    "affinity",
    "tolerations",
    "topologySpreadConstraints",
    "schedulerName",
    "priorityClassName",
    "priority",
    "runtimeClassName",
)


@dataclass(frozen=True, slots=True)
class RunnerPolicy:
    """What a group's runner Pods may have (each field names the setting that allows it), and the Gitea
    URLs groups may name (() for any)."""

    host_namespaces: bool = False
    host_path: bool = False
    service_account: bool = False
    privileged: bool = False
    docker: bool = True
    scheduling: bool = False
    gitea_urls: tuple[str, ...] = ()
    secret_names: frozenset[str] = frozenset()  # the install's own Secrets: no podTemplate may name them

    def violations(self, spec: RunnerGroupSpec) -> list[str]:
        """What the spec asks that this policy does not allow, one message each ([] if nothing)."""
        pod = _map(_map(spec.pod_template).get("spec"))
        out = [f"{field} ({setting})" for field, setting in self._asked(pod, dind_image=is_dind(spec.image))]
        out += [f"{field}: Secret {name} (GRS_PROTECTED_SECRETS)" for field, name in _secret_refs(pod)
                if name in self.secret_names]  # fmt: skip
        if not self.docker and (spec.container_mode == "dind" or is_dind(spec.image)):
            what = "spec.containerMode: dind" if spec.container_mode == "dind" else f"spec.image {spec.image}"
            out.append(f"{what} runs a privileged Docker daemon (GRS_RUNNER_POD_ALLOW_DOCKER)")
        refused = [f"not allowed by the install's runner Pod policy: {o}" for o in out]
        if self.gitea_urls and not any(_under(spec.gitea.url, allowed) for allowed in self.gitea_urls):
            allowed = ", ".join(self.gitea_urls)
            refused.append(
                f"spec.gitea.url {spec.gitea.url} is not a Gitea this install serves (GRS_GITEA_URLS: {allowed})"
            )
        return refused

    def _asked(self, pod: dict[str, Any], *, dind_image: bool) -> Iterator[tuple[str, str]]:
        """(field path, the setting that would allow it) for each thing the pod spec asks. The runner
        container of a dind image may be privileged: that is its Docker mode (`docker`)."""
        where = "spec.podTemplate.spec"
        if not self.host_namespaces:
            for key in _HOST_NAMESPACES:
                if pod.get(key):
                    yield f"{where}.{key}", "GRS_RUNNER_POD_ALLOW_HOST_NAMESPACES"
        if not self.service_account:
            for key in _ACCOUNT_FIELDS:
                if pod.get(key):
                    yield f"{where}.{key}", "GRS_RUNNER_POD_ALLOW_SERVICE_ACCOUNT"
            if pod.get("automountServiceAccountToken"):
                yield f"{where}.automountServiceAccountToken", "GRS_RUNNER_POD_ALLOW_SERVICE_ACCOUNT"
        for i, volume in _maps(pod.get("volumes")):
            if "hostPath" in volume and not self.host_path:
                yield f"{where}.volumes[{i}].hostPath", "GRS_RUNNER_POD_ALLOW_HOST_PATH"
            sources = [s for _, s in _maps(_map(volume.get("projected")).get("sources"))]
            if any("serviceAccountToken" in s for s in sources) and not self.service_account:
                yield f"{where}.volumes[{i}].projected.serviceAccountToken", "GRS_RUNNER_POD_ALLOW_SERVICE_ACCOUNT"
        if not self.scheduling:
            for key in _SCHEDULING:
                if pod.get(key) not in (None, "", {}, []):
                    yield f"{where}.{key}", "GRS_RUNNER_POD_ALLOW_SCHEDULING"
        if not self.privileged:
            for kind in _CONTAINER_LISTS:
                for i, container in _maps(pod.get(kind)):
                    if dind_image and kind == "containers" and container.get("name") == "runner":
                        continue
                    context = _map(container.get("securityContext"))
                    if context.get("privileged"):
                        yield f"{where}.{kind}[{i}].securityContext.privileged", "GRS_RUNNER_POD_ALLOW_PRIVILEGED"
                    if _map(context.get("capabilities")).get("add"):
                        yield f"{where}.{kind}[{i}].securityContext.capabilities.add", "GRS_RUNNER_POD_ALLOW_PRIVILEGED"


def _secret_refs(pod: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(field path, Secret name) of every Secret the pod spec names: env, envFrom, volumes, image pulls."""
    where = "spec.podTemplate.spec"
    for kind in _CONTAINER_LISTS:
        for i, container in _maps(pod.get(kind)):
            for j, env in _maps(container.get("env")):
                ref = _map(_map(env.get("valueFrom")).get("secretKeyRef"))
                if ref.get("name"):
                    yield f"{where}.{kind}[{i}].env[{j}]", str(ref["name"])
            for j, source in _maps(container.get("envFrom")):
                if _map(source.get("secretRef")).get("name"):
                    yield f"{where}.{kind}[{i}].envFrom[{j}]", str(source["secretRef"]["name"])
    for i, volume in _maps(pod.get("volumes")):
        if _map(volume.get("secret")).get("secretName"):
            yield f"{where}.volumes[{i}].secret", str(volume["secret"]["secretName"])
        for _, source in _maps(_map(volume.get("projected")).get("sources")):
            if _map(source.get("secret")).get("name"):
                yield f"{where}.volumes[{i}].projected", str(source["secret"]["name"])
    for i, pull in _maps(pod.get("imagePullSecrets")):
        if pull.get("name"):
            yield f"{where}.imagePullSecrets[{i}]", str(pull["name"])


def _map(value: object) -> dict[str, Any]:
    """`value` if it is an object, else {}: the pod spec's shape is checked elsewhere (`pod_schema`);
    this policy must not fail on a wrong one."""
    return value if isinstance(value, dict) else {}


def _maps(value: object) -> Iterator[tuple[int, dict[str, Any]]]:
    """(index, item) of the objects in `value` if it is a list, skipping anything else."""
    for i, item in enumerate(value if isinstance(value, list) else ()):
        if isinstance(item, dict):
            yield i, item


def _under(url: str, allowed: str) -> bool:
    """Whether `url` is `allowed` or a path under it (scheme and host compared case-insensitively)."""
    u, a = urlsplit(url.rstrip("/")), urlsplit(allowed.rstrip("/"))
    if (u.scheme.lower(), u.netloc.lower()) != (a.scheme.lower(), a.netloc.lower()):
        return False
    return u.path == a.path or u.path.startswith(a.path + "/")
