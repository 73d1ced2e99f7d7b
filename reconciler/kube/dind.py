"""Pure: Docker-in-Docker for runner Pods, as `build_job` adds it.

Owns: `containerMode: dind`, a privileged Docker daemon next to the runner whose socket the runner
reaches on a shared emptyDir, whether a runner image is itself a dind one (which needs a
privileged container), and the emptyDir a dind-rootless image's daemon keeps its data on. Must not
do I/O.
"""

from __future__ import annotations

from typing import Any

# containerMode dind: a Docker daemon as a native sidecar (an init container that keeps running; the
# Pod ends when the runner does), reached through a socket on a shared emptyDir.
DIND_CONTAINER = "dind"
DIND_SOCKET_DIR = "/run/dind"
DOCKER_HOST = f"unix://{DIND_SOCKET_DIR}/docker.sock"
# The daemon also listens at Docker's usual path in its own filesystem: a job step's `docker run -v
# /var/run/docker.sock:/var/run/docker.sock` names a path on the daemon's side, which then exists.
LOCAL_DOCKER_HOST = "unix:///var/run/docker.sock"
_DIND_VOLUMES = ("dind-socket", "dind-storage")


def is_dind(image: str) -> bool:
    """Whether the image runs Docker-in-Docker, which needs a privileged container."""
    tag = image.rsplit("/", 1)[-1]
    return "dind" in tag


def add_dind_sidecar(
    pod: dict[str, Any], runner: dict[str, Any], *, image: str, args: list[str], env: list[dict[str, Any]]
) -> None:
    """A privileged dockerd next to the runner, its socket shared: the runner and its job containers
    stay unprivileged. `args` are the group's own dockerd flags (`dindArgs`: mirrors, registries, MTU),
    `env` its proxy variables (it pulls through them).
    Whatever the podTemplate put under the same names is replaced. The daemon pulls its image as the
    runner container does (its `imagePullPolicy`, if the podTemplate sets one)."""
    socket = {"name": _DIND_VOLUMES[0], "mountPath": DIND_SOCKET_DIR}
    pod["volumes"] = [v for v in pod.get("volumes") or [] if v.get("name") not in _DIND_VOLUMES] + [
        {"name": name, "emptyDir": {}} for name in _DIND_VOLUMES
    ]
    daemon = {
        "name": DIND_CONTAINER,
        "image": image,
        "restartPolicy": "Always",  # a native sidecar: started first, stopped after the runner exits
        "args": ["dockerd", f"--host={DOCKER_HOST}", f"--host={LOCAL_DOCKER_HOST}", *args],
        "env": [{"name": "DOCKER_TLS_CERTDIR", "value": ""}, *env],
        "securityContext": {"privileged": True},
        "volumeMounts": [socket, {"name": _DIND_VOLUMES[1], "mountPath": "/var/lib/docker"}],
        # The runner starts once the daemon answers, so its first job never finds Docker missing.
        "startupProbe": {
            "exec": {"command": ["docker", f"--host={DOCKER_HOST}", "info"]},
            "periodSeconds": 1,
            "failureThreshold": 120,
        },
    }
    if runner.get("imagePullPolicy"):  # the podTemplate's pull policy (e.g. Never on a node without a
        daemon["imagePullPolicy"] = runner["imagePullPolicy"]  # registry) holds for the daemon too
    inits = [c for c in pod.get("initContainers") or [] if c.get("name") != DIND_CONTAINER]
    pod["initContainers"] = [daemon, *inits]
    runner["env"] = [e for e in runner["env"] if e.get("name") != "DOCKER_HOST"] + [
        {"name": "DOCKER_HOST", "value": DOCKER_HOST}
    ]
    mounts = [m for m in runner.get("volumeMounts") or [] if m.get("name") != _DIND_VOLUMES[0]]
    runner["volumeMounts"] = [*mounts, socket]


# A dind-rootless image (act_runner's, on docker:dind-rootless) keeps its daemon's data under the
# rootless user's home. On the container's own overlayfs root the daemon's overlay2 cannot work (and
# falls back to vfs, twice the space), so the data goes on an emptyDir, as dind's /var/lib/docker
# does. One level above the data root: the daemon chmods the data root itself, which an emptyDir
# owned by root refuses.
ROOTLESS_DATA = "/home/rootless/.local/share"
_ROOTLESS_VOLUME = "dind-rootless-data"


def is_rootless_dind(image: str) -> bool:
    """Whether the image runs a rootless Docker daemon of its own (a `dind-rootless` tag)."""
    return "dind-rootless" in image.rsplit("/", 1)[-1]


def add_rootless_storage(pod: dict[str, Any], runner: dict[str, Any]) -> None:
    """The emptyDir for a dind-rootless runner's daemon data, unless the podTemplate mounts something
    there itself."""
    mounts = runner.get("volumeMounts") or []
    if any(m.get("mountPath", "").rstrip("/") in (ROOTLESS_DATA, ROOTLESS_DATA + "/docker") for m in mounts):
        return
    pod["volumes"] = [*(pod.get("volumes") or []), {"name": _ROOTLESS_VOLUME, "emptyDir": {}}]
    runner["volumeMounts"] = [*mounts, {"name": _ROOTLESS_VOLUME, "mountPath": ROOTLESS_DATA}]
