"""The RunnerGroup spec (`gitea.bpg.pw/v1alpha1`): its pydantic model, the source of truth for the CRD.

Owns: the spec's fields with their defaults and bounds, the older forms gitea-runner-operator wrote
that it still reads, and the messages its validation shares with the CRD's CEL rules (`crd` renders
the CustomResourceDefinition from this model). Must not do I/O.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator, model_validator

DEFAULT_IMAGE = "docker.io/gitea/act_runner:0.2.13-dind-rootless"
DEFAULT_DIND_IMAGE = "docker.io/library/docker:28-dind"

_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
DURATION_PATTERN = r"^([0-9]+h)?([0-9]+m)?([0-9]+s)?$"

# Said alike by the model's validators and by the CRD's CEL rules (see `crd`).
GITEA_URL_MESSAGE = "set spec.gitea.url, or spec.giteaURL as gitea-runner-operator wrote it, not both"
REPO_MESSAGE = "spec.repo is owner/name, or a bare name with spec.org or spec.user as its owner"
FLAT_REF_MESSAGE = "give secretRef {name, key}, or name and key alone as gitea-runner-operator did"
OPTIONAL_REF_MESSAGE = "a token's Secret cannot be optional: remove optional"
FETCH_INTERVAL_MESSAGE = "fetchInterval must be at least 1s"
DIND_ARGS_MESSAGE = "spec.dindArgs needs containerMode dind, and cannot set --host (the controller owns the sockets)"

# A Gitea base URL: scheme, a host (name, IPv4, or [IPv6]) without user or password, a port, a path.
GITEA_URL_PATTERN = r"^https?://([^\s/:@\[\]?#]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?(/[^\s?#]*)?$"

# One dockerd flag, `--name` or `--name=value` (e.g. --registry-mirror=https://mirror.example.com).
DockerdArg = Annotated[str, StringConstraints(pattern=r"^--[a-z][a-z0-9-]*(=.*)?$", max_length=1024)]


def parse_duration(text: str) -> int:
    """Seconds in a duration like `90s`, `10m` or `1h30m`."""
    match = _DURATION.match(text)
    if not match or not text:
        raise ValueError(f"not a duration like 90s, 10m or 1h30m: {text!r}")
    h, m, s = (int(g) if g else 0 for g in match.groups())
    return h * 3600 + m * 60 + s


def _without_nulls(value: Any) -> Any:
    """`value` with every object's null fields left out, at any depth."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _sets_host(arg: str) -> bool:
    return arg == "--host" or arg.startswith("--host=")


class _Spec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SecretKeyRef(_Spec):
    """Names a key in a Secret in the RunnerGroup's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(min_length=1, max_length=253, description="Key within the Secret.")


class SecretKeySelector(_Spec):
    """A reference to a Secret key; the value never appears in a Job spec, log or status.

    gitea-runner-operator's form, `name` and `key` without `secretRef`, is read as the same thing.
    """

    secret_ref: SecretKeyRef = Field(alias="secretRef", description="The Secret and key holding the value.")

    @model_validator(mode="before")
    @classmethod
    def _flat_form(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not {"name", "key", "optional"} & data.keys():
            return data
        if "secretRef" in data or "secret_ref" in data or not {"name", "key"} <= data.keys():
            raise ValueError(FLAT_REF_MESSAGE)
        if data.get("optional"):
            raise ValueError(OPTIONAL_REF_MESSAGE)
        rest = {k: v for k, v in data.items() if k not in ("name", "key", "optional")}
        return {"secretRef": {"name": data["name"], "key": data["key"]}, **rest}


class GiteaSpec(_Spec):
    """The Gitea instance."""

    url: str = Field(
        pattern=GITEA_URL_PATTERN,
        description=(
            "Base URL of the Gitea instance, as runners reach it (e.g. https://gitea.example.com): a host name or"
            " address, an optional port, an optional path; no user or password."
        ),
    )

    @field_validator("url")
    @classmethod
    def _port(cls, url: str) -> str:
        try:
            port = urlsplit(url).port  # the pattern admits 5 digits; this refuses what no socket takes
        except ValueError:
            port = 0
        if port is not None and not 1 <= port <= 65535:
            raise ValueError(f"not a URL with a valid port (1-65535): {url}")
        return url


class RunnerGroupSpec(_Spec):
    """What runners a group starts, for which jobs, and how many at most."""

    scope: Literal["global", "org", "user", "repo"] = Field(description="Which Gitea jobs this group serves.")
    org: str | None = Field(None, min_length=1, description="Organization name; required when scope is org.")
    user: str | None = Field(None, min_length=1, description="User name; required when scope is user.")
    repo: str | None = Field(
        None,
        pattern=r"^[^/\s]+(/[^/\s]+)?$",
        description=(
            "Repository as owner/name; required when scope is repo. A bare name takes spec.org (or spec.user) "
            "as its owner, as gitea-runner-operator wrote it."
        ),
    )
    gitea: GiteaSpec
    labels: list[str] = Field(
        default_factory=list,
        description="Runner labels (name or name:scheme). act_runner's default labels are added unless overridden.",
    )
    default_labels: list[str] | None = Field(
        None,
        alias="defaultLabels",
        description="Replaces the default labels added to `labels`; [] adds none.",
    )
    max_active_runners: int = Field(
        alias="maxActiveRunners", ge=1, le=10_000, description="Most runner Jobs of this group at once."
    )
    min_idle_runners: int = Field(
        0, alias="minIdleRunners", ge=0, description="Warm runners kept ready with no job waiting."
    )
    registration_token: SecretKeySelector | None = Field(
        None,
        alias="registrationToken",
        description=(
            "Secret key with the runner registration token of the group's own scope. Optional: without it, the "
            "controller fetches that token with the API token, which then needs write on the scope."
        ),
    )
    auth_token: SecretKeySelector = Field(
        alias="authToken",
        description="Secret key with a Gitea API token of the group's scope: it polls for queued jobs, reads and "
        "deletes runners, and fetches the registration token when registrationToken is not given.",
    )
    image: str = Field(DEFAULT_IMAGE, min_length=1, description="act_runner image of the runner container.")
    container_mode: Literal["", "dind"] = Field(
        "",
        alias="containerMode",
        description=(
            "dind: a privileged Docker daemon sidecar serves the runner's jobs (docker build, services:), "
            "so the runner image itself runs unprivileged. Empty: the runner image alone."
        ),
    )
    dind_image: str = Field(
        DEFAULT_DIND_IMAGE, alias="dindImage", min_length=1, description="Image of the Docker daemon sidecar."
    )
    dind_args: list[DockerdArg] = Field(
        default_factory=list,
        alias="dindArgs",
        max_length=64,
        description=(
            "More dockerd flags for the Docker daemon sidecar (containerMode dind), e.g. "
            "--registry-mirror=https://mirror.example.com, --insecure-registry=registry.internal:5000, --mtu=1400."
        ),
    )
    pod_template: dict[str, Any] | None = Field(
        None,
        alias="podTemplate",
        description=(
            "A corev1 PodTemplateSpec merged under the controller's invariants (runner env, restartPolicy, "
            "no service account token)."
        ),
    )
    ttl_seconds_after_finished: int = Field(
        600, alias="ttlSecondsAfterFinished", ge=0, description="Seconds a finished runner Job is kept."
    )
    active_deadline_seconds: int | None = Field(
        None, alias="activeDeadlineSeconds", ge=1, description="Hard limit on a runner Job's run time."
    )
    pending_timeout: str = Field(
        "10m",
        alias="pendingTimeout",
        pattern=DURATION_PATTERN,
        description="A runner Pod Pending longer than this is deleted (e.g. 10m).",
    )
    fetch_interval: str = Field(
        "1s",
        alias="fetchInterval",
        pattern=DURATION_PATTERN,
        description=(
            "How often a runner without a job asks Gitea for one (at least 1s): the controller pins act_runner's "
            "fetch_interval and fetch_interval_max to it in every runner's config, so a warm runner never backs "
            "off. Each idle runner makes one request to Gitea per interval."
        ),
    )
    suspend: bool = Field(False, description="Start no new runners; running ones finish.")

    @model_validator(mode="before")
    @classmethod
    def _older_forms(cls, data: Any) -> Any:
        """Read what gitea-runner-operator wrote: `giteaURL`, and a bare `repo` name under `org`/`user`."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if ("gitea" in data) == ("giteaURL" in data):
            raise ValueError(GITEA_URL_MESSAGE)
        if "giteaURL" in data:
            data["gitea"] = {"url": data.pop("giteaURL")}
        repo, owner = data.get("repo"), data.get("org") or data.get("user")
        if data.get("scope") == "repo" and isinstance(repo, str) and "/" not in repo and isinstance(owner, str):
            data["repo"] = f"{owner}/{repo}"
        return data

    @field_validator("pod_template")
    @classmethod
    def _unset_nulls(cls, template: dict[str, Any] | None) -> dict[str, Any] | None:
        """A null field of the podTemplate is unset, as the API server reads one (a null in a list is not:
        the pod schema refuses it)."""
        return None if template is None else _without_nulls(template)

    @model_validator(mode="after")
    def _scope_target(self) -> RunnerGroupSpec:
        needed = {"org": self.org, "user": self.user, "repo": self.repo}.get(self.scope, "n/a")
        if not needed:
            raise ValueError(f"spec.{self.scope} is required when scope is {self.scope}")
        if self.scope == "repo" and "/" not in (self.repo or ""):
            raise ValueError(REPO_MESSAGE)
        if self.min_idle_runners > self.max_active_runners:
            raise ValueError("minIdleRunners must not exceed maxActiveRunners")
        parse_duration(self.pending_timeout)
        if parse_duration(self.fetch_interval) < 1:
            raise ValueError(FETCH_INTERVAL_MESSAGE)
        if self.dind_args and (self.container_mode != "dind" or any(_sets_host(a) for a in self.dind_args)):
            raise ValueError(DIND_ARGS_MESSAGE)
        return self

    @property
    def target(self) -> str:
        """The org, user or repo this group serves ('*' for global)."""
        return {"org": self.org, "user": self.user, "repo": self.repo}.get(self.scope) or "*"

    @property
    def registered_at(self) -> str:
        """Where the group's runners register: "{Gitea URL} {scope} {target}"."""
        return f"{self.gitea.url} {self.scope} {self.target}"

    @property
    def pending_timeout_seconds(self) -> int:
        """`pendingTimeout` in seconds."""
        return parse_duration(self.pending_timeout)
