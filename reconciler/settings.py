"""The reconciler's settings: every field documented, read once from `GRS_*` variables in `main()`."""

from __future__ import annotations

import socket
from typing import Annotated, Literal

from pydantic import Field, SecretStr, model_validator

from reconciler.kube.placement import Placement
from reconciler.kube.runner_policy import RunnerPolicy
from webhook_scaler.config import FromFile
from webhook_scaler.gitea import instance_url
from webhook_scaler.settings import RedisSettings


class Settings(RedisSettings):
    """The reconciler process's settings."""

    kubeconfig: str | None = Field(
        None,
        description="Kubeconfig file; unset = the in-cluster service account in a cluster, else $KUBECONFIG or "
        "~/.kube/config.",
    )
    watch_namespace: str = Field(
        "",
        pattern=r"^[a-z0-9-]*(,[a-z0-9-]+)*$",
        description=(
            "Namespaces of the RunnerGroups to serve (their runners run there too), comma-separated; "
            "empty = all namespaces."
        ),
    )
    replica_id: str = Field(default_factory=socket.gethostname, description="This replica's name, for leases.")
    poll_enabled: bool = Field(True, description="Poll the Gitea API as the fallback for missed webhooks.")
    poll_interval: float = Field(30.0, ge=1, description="Seconds between polls of each Gitea scope.")
    poll_jitter: float = Field(0.2, ge=0, le=1, description="Random fraction added to or taken from each interval.")
    poll_backoff_max: float = Field(300.0, ge=1, description="Longest wait after repeated poll errors.")
    gitea_timeout: float = Field(10.0, gt=0, description="Seconds before a Gitea API call counts as failed.")
    register_timeout: float = Field(
        30.0,
        gt=0,
        le=75,
        description=(
            "Seconds Gitea may take to register one runner (its Register call, before the runner Job is created); "
            "then that runner's create fails and its job gets a runner on a later pass. Longer than "
            "GRS_GITEA_TIMEOUT: Register writes to Gitea's database, which a burst of runners keeps busy "
            "(12.8 s median measured with SQLite, 200 runners at once). At most 75, so that a runner still "
            "registering keeps its seat (a seat 90 s old whose Job does not exist is freed)."
        ),
    )
    gitea_ca_file: str | None = Field(
        None,
        description=(
            "PEM file of CA certificates to trust for Gitea, besides the system's: for the reconciler's calls, "
            "and given to every runner for its registration, fetches and clones."
        ),
    )
    runner_cache_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s\"\\]+$",
        description=(
            "URL of the act_runner cache server every runner uses for actions/cache (its "
            "`cache.external_server`); unset = each runner's own, empty one."
        ),
    )
    runner_cache_secret_file: str | None = Field(
        None,
        description=(
            "File holding the secret the cache server and its runners share (act_runner 1.x needs one); "
            "the reconciler keeps a copy in each runner namespace (GRS_RUNNER_CACHE_SECRET_NAME)."
        ),
    )
    runner_cache_secret_name: str = Field(
        "gitea-runner-cache",
        pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$",
        description="The Secret, in each runner namespace, with the cache server's secret (key `secret`).",
    )
    protected_secrets: str = Field(
        "",
        pattern=r"^([a-z0-9-]+/[a-z0-9.-]+)?(,[a-z0-9-]+/[a-z0-9.-]+)*$",
        description=(
            "The install's own Secrets, as namespace/name, comma-separated: no RunnerGroup may use them (nor "
            "any Secret labelled app.kubernetes.io/created-by=gitea-runner-scaler)."
        ),
    )
    gitea_urls: str = Field(
        "",
        pattern=r"^(https?://[^\s,]+)?(,https?://[^\s,]+)*$",
        description=(
            "The Gitea URLs RunnerGroups may name (spec.gitea.url, or a path under one), comma-separated; "
            "empty = any. A group naming another is refused: nothing is polled there, no runner registers."
        ),
    )
    gitea_url: str = Field(
        "",
        pattern=r"^(https?://[^\s,]+)?$",
        description=(
            "The default Gitea instance's URL: the Gitea whose jobs have the default Redis keys and whose "
            "webhooks the secret lines without [name] sign. A RunnerGroup whose gitea.url is neither it nor "
            "an instance of GRS_GITEA_INSTANCES is refused. Unset = the one URL of GRS_GITEA_URLS that "
            "GRS_GITEA_INSTANCES does not name, if there is exactly one; else no default instance."
        ),
    )
    webhook_manage: bool = Field(
        False,
        description=(
            "Install the `workflow_job` webhook of each proven RunnerGroup's scope in Gitea with the group's API "
            "token (it needs write: on the scope's hooks), signed with a secret of that scope's own (derived from "
            "GRS_WEBHOOK_KEY), and delete it when the scope's last group goes. Needs GRS_WEBHOOK_URL and "
            "GRS_WEBHOOK_KEY."
        ),
    )
    webhook_url: str = Field(
        "",
        pattern=r"^(https?://[^\s,]+)?$",
        description="Where Gitea delivers the webhooks the reconciler installs: the receiver as Gitea reaches it.",
    )
    webhook_key: Annotated[SecretStr | None, FromFile("webhook_key")] = Field(
        None,
        min_length=16,
        description="The key the installed webhooks' secrets derive from (the receiver's GRS_WEBHOOK_KEY).",
    )
    namespace_owners: str = Field(
        "",
        pattern=r"^([a-z0-9-]+=(\*|[\w.-]+(\|[\w.-]+)*))?(,[a-z0-9-]+=(\*|[\w.-]+(\|[\w.-]+)*))*$",
        description=(
            "The Gitea owners (orgs and users) each namespace's RunnerGroups may serve: `ns=owner1|owner2,ns2=*` "
            "(`*`: any owner, and global groups). A group naming a repository, org or user of another owner, or "
            "global where its namespace has no `*`, or in a namespace not named, is refused (Ready=False "
            "InvalidSpec naming this setting): no job of that owner goes to it. Owners compare case-insensitively, "
            "in every Gitea instance. Unset or empty = no pin (a group still takes jobs only of a scope its API token "
            "proves it administers)."
        ),
    )
    runner_pod_allow_host_namespaces: bool = Field(
        False, description="Runner Pods may use the host's namespaces (a podTemplate's hostPID, hostIPC, hostNetwork)."
    )
    runner_pod_allow_host_path: bool = Field(False, description="Runner Pods may mount hostPath volumes.")
    runner_pod_allow_service_account: bool = Field(
        False,
        description=(
            "Runner Pods may run under a service account with its token (a podTemplate's serviceAccountName, "
            "automountServiceAccountToken, projected token volumes)."
        ),
    )
    runner_pod_allow_privileged: bool = Field(
        False, description="A podTemplate's containers may be privileged or add capabilities."
    )
    runner_pod_allow_docker: bool = Field(
        True,
        description="Allow the Docker modes (containerMode dind, a dind image); their runner Pods run privileged.",
    )
    runner_pod_allow_scheduling: bool = Field(
        False,
        description=(
            "A podTemplate may choose its runners' nodes or displace other Pods: nodeName, nodeSelector, affinity, "
            "tolerations, topologySpreadConstraints, schedulerName, priorityClassName, priority, runtimeClassName. "
            "Off: where runners run is the admin's (GRS_RUNNER_PLACEMENT)."
        ),
    )
    runner_placement: str = Field(
        "",
        description=(
            'Where runner Pods run, as JSON: {"default": {"nodeSelector": {...}, "tolerations": [...]}, "namespaces": '
            '{"team-a": {...}}}; a namespace entry sets each field it names instead of the default one. Put over '
            "every runner Pod: these nodeSelector keys win over the podTemplate's, these tolerations are added to its. "
            "Part of the runner template: a change replaces idle runners. Empty = the podTemplate's or the scheduler's."
        ),
    )
    claim_ttl: float = Field(
        300.0, ge=5, description="Seconds a job's claim lasts once its runner Job exists; then a runner is retried."
    )
    resync_interval: float = Field(60.0, ge=1, description="Seconds between full passes with no event at all.")
    idle_grace: float = Field(60.0, ge=0, description="Seconds an idle surplus runner is kept before deletion.")
    retry_initial: float = Field(1.0, gt=0, description="First backoff after a transient error, in seconds.")
    retry_max: float = Field(60.0, gt=0, description="Longest backoff after transient errors, in seconds.")
    finish_grace: float = Field(
        30.0, ge=0, description="Seconds a runner may keep running after the job it took is over; then it is deleted."
    )
    queue_objective: float = Field(
        30.0,
        ge=0,
        description="Seconds a queued job should wait at most for a runner (the queue-time objective): a group "
        "whose oldest queued job waited longer while at its maxActiveRunners says Starved=True; 0 = off.",
    )
    runner_backoff_initial: float = Field(
        10.0, gt=0, description="Seconds a group waits after a runner failed before it starts another."
    )
    runner_backoff_max: float = Field(
        300.0, gt=0, description="Longest wait after runners failed in a row (the wait doubles each time)."
    )
    ghost_sweep_interval: float = Field(
        120.0, ge=0, description="Seconds between sweeps of the offline runner rows our runners left in Gitea; 0 = off."
    )
    drain_timeout: float = Field(
        3600.0,
        gt=0,
        description=(
            "Seconds a deleted RunnerGroup may wait for its runners, from its deletionTimestamp; then its finalizer "
            "goes whatever is left, with a DrainTimedOut Warning Event naming it (a busy runner loses its job). "
            "How long a job runs cannot be known: an hour lets most CI jobs end while a deleted group (and its "
            "namespace) does not hang for long; raise it for longer jobs (Gitea ends a task after 3 h, its "
            "ENDLESS_TASK_TIMEOUT)."
        ),
    )
    create_concurrency: int = Field(
        32,
        ge=1,
        le=1000,
        description=(
            "Runner Job creates in flight at once, across all groups (the API server's clients are not "
            "otherwise rate limited)."
        ),
    )
    lease_ttl: float = Field(15.0, ge=1, description="Seconds a group's reconcile lease lasts at most.")
    listen_host: str = Field("0.0.0.0", description="Address of the metrics and health server.")  # noqa: S104
    listen_port: int = Field(8081, ge=0, le=65535, description="Port of the metrics and health server.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    log_format: Literal["json", "text"] = Field("json", description="Log format.")

    @property
    def runner_policy(self) -> RunnerPolicy:
        """The runner Pod policy these settings give."""
        return RunnerPolicy(
            host_namespaces=self.runner_pod_allow_host_namespaces,
            host_path=self.runner_pod_allow_host_path,
            service_account=self.runner_pod_allow_service_account,
            privileged=self.runner_pod_allow_privileged,
            docker=self.runner_pod_allow_docker,
            scheduling=self.runner_pod_allow_scheduling,
            gitea_urls=tuple(u for u in self.gitea_urls.split(",") if u),
            secret_names=frozenset(
                [name for _, name in self.protected]
                + ([self.runner_cache_secret_name] if self.runner_cache_url else [])
            ),
        )

    @property
    def default_gitea(self) -> str:
        """The default Gitea instance's URL (`GRS_GITEA_URL`, else the one unnamed URL of `GRS_GITEA_URLS`), or
        "" for none."""
        if self.gitea_url:
            return self.gitea_url
        named = {instance_url(url) for url in self.instances.values()}
        unnamed = [url for url in self.gitea_urls.split(",") if url and instance_url(url) not in named]
        return unnamed[0] if len(unnamed) == 1 else ""

    @model_validator(mode="after")
    def _default_not_named(self) -> Settings:
        named = {instance_url(url): name for name, url in self.instances.items()}
        if self.gitea_url and instance_url(self.gitea_url) in named:
            raise ValueError(
                f"GRS_GITEA_URL {self.gitea_url} is also the instance {named[instance_url(self.gitea_url)]} of "
                "GRS_GITEA_INSTANCES: a Gitea is the default instance (the chart's gitea.url) or a named one "
                "(giteaInstances), not both"
            )
        return self

    @model_validator(mode="after")
    def _managed_webhooks_have_a_url_and_key(self) -> Settings:
        if self.webhook_manage and not (self.webhook_url and self.webhook_key):
            raise ValueError("GRS_WEBHOOK_MANAGE needs GRS_WEBHOOK_URL and GRS_WEBHOOK_KEY (or GRS_WEBHOOK_KEY_FILE)")
        return self

    @model_validator(mode="after")
    def _pins_parse(self) -> Settings:
        _ = self.pins, self.placement  # a namespace named twice, a placement that is not one: refused at start
        return self

    @property
    def placement(self) -> Placement:
        """Where runner Pods run (`GRS_RUNNER_PLACEMENT`)."""
        return Placement.parse(self.runner_placement)

    @property
    def pins(self) -> dict[str, frozenset[str] | None] | None:
        """The owners each namespace may serve (`GRS_NAMESPACE_OWNERS`; `decide.ownership.pinned`), or None."""
        if not self.namespace_owners:
            return None
        pins: dict[str, frozenset[str] | None] = {}
        for namespace, owners in (entry.split("=", 1) for entry in self.namespace_owners.split(",")):
            if namespace in pins:
                raise ValueError(f"GRS_NAMESPACE_OWNERS names namespace {namespace} twice: join its owners with |")
            pins[namespace] = None if owners == "*" else frozenset(o.lower() for o in owners.split("|"))
        return pins

    @property
    def protected(self) -> frozenset[tuple[str, str]]:
        """The install's own Secrets: (namespace, name)."""
        pairs = (p.split("/", 1) for p in self.protected_secrets.split(",") if p)
        return frozenset((namespace, name) for namespace, name in pairs)

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The namespaces served, or () for all of them."""
        return tuple(dict.fromkeys(n for n in self.watch_namespace.split(",") if n))
