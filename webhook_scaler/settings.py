"""The receiver's settings: every field documented, read once from `GRS_*` variables in `main()`.

Must not create clients or be imported for a module-level singleton.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from webhook_scaler.config import FromFile
from webhook_scaler.delivery import SigningKey
from webhook_scaler.gitea import instance_url
from webhook_scaler.hook_keys import Deriver
from webhook_scaler.store.client import parse_url


class RedisSettings(BaseModel):
    """How both processes reach Redis."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    redis_url: str = Field(
        "redis://localhost:6379/0",
        description=(
            "Redis URL: redis://host:port/db (rediss:// for TLS) for one server, "
            "redis+cluster://host:port,host:port for a Redis Cluster, "
            "redis+sentinel://host:port,host:port/service[/db] for the master Sentinel names."
        ),
    )
    redis_password: Annotated[SecretStr | None, FromFile("redis_password")] = Field(
        None, description="Redis password; prefer GRS_REDIS_PASSWORD_FILE or a secretKeyRef env."
    )
    redis_prefix: str = Field(
        "grs", pattern=r"^[A-Za-z0-9_.-]{1,64}$", description="Key prefix, so installations can share a Redis."
    )
    redis_timeout: float = Field(2.0, gt=0, description="Seconds before a Redis call counts as failed.")
    redis_max_connections: int = Field(
        64, ge=1, le=10_000, description="Redis connections per process; a call waits for a free one up to the timeout."
    )
    job_ttl: int = Field(25 * 3600, ge=60, description="Seconds an unfinished job record lives.")
    completed_ttl: int = Field(24 * 3600, ge=60, description="Seconds a finished job is remembered.")
    delivery_ttl: int = Field(24 * 3600, ge=60, description="Seconds a delivery id is remembered.")
    gitea_instances: str = Field(
        "",
        pattern=r"^([a-z0-9][a-z0-9-]{0,30}=https?://[^\s,=]+)?(,[a-z0-9][a-z0-9-]{0,30}=https?://[^\s,=]+)*$",
        description=(
            "The Gitea instances besides the default one, as `name=URL,name=URL`: a RunnerGroup whose "
            "gitea.url is one of them serves that instance's jobs, and webhook secret lines `[name] ...` speak "
            "for its deliveries. Job ids are numbered per instance; each instance's jobs have keys of their own."
        ),
    )

    @property
    def instances(self) -> dict[str, str]:
        """The named Gitea instances: name -> URL."""
        return dict(pair.split("=", 1) for pair in self.gitea_instances.split(",") if pair)

    @field_validator("gitea_instances")
    @classmethod
    def _names_once(cls, value: str) -> str:
        pairs = [pair.split("=", 1) for pair in value.split(",") if pair]
        if len({n for n, _ in pairs}) != len(pairs) or len({instance_url(u) for _, u in pairs}) != len(pairs):
            raise ValueError("each Gitea instance is named once, and each name is one instance's")
        return value

    @field_validator("redis_url")
    @classmethod
    def _known_topology(cls, value: str) -> str:
        parse_url(value)  # a ValueError names the problem, never the URL (it may hold a password)
        return value

    @field_validator("redis_password", mode="before")
    @classmethod
    def _strip(cls, value: object) -> object:
        # A mounted file ends with a newline; an empty password is no password.
        if isinstance(value, str):
            return value.strip() or None
        return value


# A secret line: `[instance] @owner1,owner2 SECRET`, the instance and the owners optional.
_INSTANCE = re.compile(r"\[([a-z0-9][a-z0-9-]{0,30})\]\s+(\S.*)")
_BOUND = re.compile(r"@([^\s,]+(?:,[^\s,]+)*)\s+(\S.*)")


class Settings(RedisSettings):
    """The receiver process's settings."""

    listen_host: str = Field("0.0.0.0", description="Address to listen on.")  # noqa: S104
    listen_port: int = Field(8080, ge=1, le=65535, description="Port to listen on.")
    webhook_path: str = Field("/webhook", pattern=r"^/[A-Za-z0-9/_.-]*$", description="Webhook route.")
    webhook_secrets: Annotated[tuple[SecretStr, ...], FromFile("webhook_secret")] = Field(
        (),
        description=(
            "Accepted webhook secrets, one per line in GRS_WEBHOOK_SECRET or the file named by "
            "GRS_WEBHOOK_SECRET_FILE; several may be valid at once (rotation, one webhook per org). A line "
            "`@owner1,owner2 SECRET` binds SECRET to those owners' repositories: a delivery about another "
            "owner's gets 403. A line `[name] SECRET` (or `[name] @owners SECRET`) signs the deliveries of the "
            "Gitea instance GRS_GITEA_INSTANCES names so; other lines, the default instance's."
        ),
    )
    webhook_key: Annotated[SecretStr | None, FromFile("webhook_key")] = Field(
        None,
        min_length=16,
        description=(
            "The key the secrets of the webhooks the reconciler installs (GRS_WEBHOOK_MANAGE) are derived from, "
            "the same as the reconciler's; in GRS_WEBHOOK_KEY or the file GRS_WEBHOOK_KEY_FILE names. A delivery "
            "no secret line signed is accepted if its owner's, its repository's or its instance's managed webhook "
            "secret did, for that owner or repository only. Unset: only the secret lines."
        ),
    )
    insecure_accept_unsigned_webhooks: bool = Field(
        False, description="Accept deliveries without any signature. For local experiments only."
    )
    replay_window: int | None = Field(
        None,
        ge=0,
        description=(
            "Seconds (default: the shorter of GRS_JOB_TTL and GRS_COMPLETED_TTL, a day; 0: off). A delivery about a "
            "job Gitea created longer ago may be a replay: a waiting one changes nothing (200 too_old), a queued one "
            "is recorded aged, and gets a runner only once the reconciler's poll lists it queued (or at once where "
            "the poll is off or failing). At most GRS_JOB_TTL and GRS_COMPLETED_TTL: while a job's record lives, "
            "replays of it change nothing anyway."
        ),
    )
    clock_skew: int = Field(
        300,
        ge=0,
        le=3600,
        description=(
            "Seconds Gitea's clock may run ahead of this receiver's. A delivery about a job whose created_at lies "
            "further in the future is refused (400) and changes nothing: no job is delivered before Gitea created it, "
            "so it is forged (a job id not used yet) or a clock is wrong."
        ),
    )
    max_body_bytes: int = Field(1024 * 1024, ge=1024, description="Larger bodies get 413.")
    shutdown_timeout: float = Field(10.0, ge=0, description="Seconds to finish requests on SIGTERM.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", description="Log level.")
    log_format: Literal["json", "text"] = Field("json", description="Log format.")

    @field_validator("webhook_secrets", mode="before")
    @classmethod
    def _split_lines(cls, value: object) -> object:
        if isinstance(value, str):
            return tuple(line.strip() for line in value.splitlines() if line.strip())
        return value

    @field_validator("webhook_secrets", mode="after")
    @classmethod
    def _bound_lines_name_a_secret(cls, value: tuple[SecretStr, ...]) -> tuple[SecretStr, ...]:
        for n, line in enumerate(value, 1):
            _, text = _instance_of(line.get_secret_value(), n)
            bound = _BOUND.fullmatch(text)
            if text.startswith("@") and not bound:
                raise ValueError(f"line {n}: a bound secret is `@owner1,owner2 SECRET` (owners, a space, the secret)")
            if bound and bound.group(2).startswith("["):
                raise ValueError(f"line {n}: the instance comes first: `[name] @owner1,owner2 SECRET`")
        return value

    @model_validator(mode="after")
    def _lines_name_known_instances(self) -> Settings:
        seen: dict[bytes, str] = {}
        for n, key in enumerate(self.signing_keys, 1):
            if key.instance and key.instance not in self.instances:
                raise ValueError(f"line {n}: [{key.instance}] is no instance GRS_GITEA_INSTANCES names")
            if seen.setdefault(key.secret, key.instance) != key.instance:
                raise ValueError(f"line {n}: one secret may speak for one Gitea instance only")
        return self

    @property
    def window_s(self) -> int:
        """The replay window in seconds (0: off)."""
        return min(self.job_ttl, self.completed_ttl) if self.replay_window is None else self.replay_window

    @model_validator(mode="after")
    def _window_within_the_records(self) -> Settings:
        if self.replay_window is not None and self.replay_window > min(self.job_ttl, self.completed_ttl):
            raise ValueError(
                f"GRS_REPLAY_WINDOW ({self.replay_window}) must be at most GRS_JOB_TTL ({self.job_ttl}) and "
                f"GRS_COMPLETED_TTL ({self.completed_ttl}): past a job's record only the window tells a replay"
            )
        return self

    @model_validator(mode="after")
    def _secret_or_explicitly_insecure(self) -> Settings:
        if not self.webhook_secrets and not self.webhook_key and not self.insecure_accept_unsigned_webhooks:
            raise ValueError(
                "no webhook secret: set GRS_WEBHOOK_SECRET or GRS_WEBHOOK_SECRET_FILE "
                "(or GRS_INSECURE_ACCEPT_UNSIGNED_WEBHOOKS=true to accept unsigned deliveries)"
            )
        return self

    @property
    def deriver(self) -> Deriver | None:
        """The managed webhooks' secrets (`hook_keys`), for every instance; None without GRS_WEBHOOK_KEY."""
        if self.webhook_key is None:
            return None
        return Deriver(self.webhook_key.get_secret_value().strip().encode("utf-8"), ("", *self.instances))

    @property
    def signing_keys(self) -> tuple[SigningKey, ...]:
        """The secrets as the HMAC wants them, each with the owners it is bound to (None: any) and the
        Gitea instance it speaks for ("": the default one)."""
        keys = []
        for n, line in enumerate(self.webhook_secrets, 1):
            instance, text = _instance_of(line.get_secret_value(), n)
            bound = _BOUND.fullmatch(text)
            if bound:
                owners = frozenset(o.lower() for o in bound.group(1).split(","))
                keys.append(SigningKey(bound.group(2).encode("utf-8"), owners, instance))
            else:
                keys.append(SigningKey(text.encode("utf-8"), instance=instance))
        return tuple(keys)


def _instance_of(line: str, n: int) -> tuple[str, str]:
    """A secret line's instance ("": the default one) and the rest of the line."""
    if not line.startswith("["):
        return "", line
    named = _INSTANCE.fullmatch(line)
    if named is None:
        raise ValueError(f"line {n}: a secret of a named instance is `[name] SECRET` or `[name] @owners SECRET`")
    return named.group(1), named.group(2)
