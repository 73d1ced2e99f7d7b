"""Pure: the runner config the prepare step writes, and the shared cache every runner uses (act_runner's
`cache-server`, which the chart can run).

Owns: `RunnerCache` (the server's URL, the secret the server shares with its runners, and the Secret
the controller keeps it in, in each runner namespace), the env it gives the prepare step, and
`WRITE_CONFIG`, the POSIX sh and awk that merge the group's fetch interval and the cache settings into
the runner's own config (the image's or the podTemplate's `CONFIG_FILE`, or none) on the state volume.

The secret reaches the register step only through `secretKeyRef` and lands in that config file, which
the runner reads (as act_runner 1.x needs: it registers each job's token with the server, which then
keeps each repository's entries apart). Must not do I/O.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

SECRET_KEY = "secret"  # noqa: S105 (a key name)
URL_ENV, SECRET_ENV, OUT_ENV = "GRS_CACHE_URL", "GRS_CACHE_SECRET", "GRS_CONFIG_OUT"
FETCH_ENV = "GRS_FETCH_INTERVAL"
CONFIG_FILE = "CONFIG_FILE"  # the upstream images' entrypoint passes it as `--config`


def config_path(state_dir: str) -> str:
    """Where the merged runner config is written."""
    return f"{state_dir}/.grs/config.yaml"


@dataclass(frozen=True, slots=True)
class RunnerCache:
    """The cache server's URL, the secret it shares with its runners ("" for a server that takes none:
    act_runner 0.x's), and the Secret that holds it in each runner namespace."""

    url: str
    secret: str = field(default="", repr=False)
    secret_name: str = "gitea-runner-cache"  # noqa: S105 (a name)

    @property
    def digest(self) -> str:
        """What runners get, for the template hash: a new URL replaces idle runners. Not the secret (a
        hash of it would be on every Job, open to guessing): a rotated one reaches new runners."""
        return hashlib.sha256(f"{self.url}\n{self.secret_name if self.secret else ''}".encode()).hexdigest()[:16]

    def register_env(self) -> list[dict[str, Any]]:
        """The prepare step's: the URL and the secret (by reference)."""
        env: list[dict[str, Any]] = [{"name": URL_ENV, "value": self.url}]
        if self.secret:
            ref = {"name": self.secret_name, "key": SECRET_KEY}
            env.append({"name": SECRET_ENV, "valueFrom": {"secretKeyRef": ref}})
        return env


def config_env(state_dir: str, *, fetch_interval: str) -> list[dict[str, Any]]:
    """The prepare step's: where to write the runner's config, and the group's fetch interval to pin in it."""
    return [{"name": OUT_ENV, "value": config_path(state_dir)}, {"name": FETCH_ENV, "value": fetch_interval}]


# awk: the base config (CRLF or LF) with the keys we own set to ours: under `runner:`, fetch_interval and
# fetch_interval_max (both the group's fetch interval: a runner without a job polls at that pace and never
# backs off); under `cache:`, if the install has a cache server, enabled / external_server / external_secret.
# A block keeps its other keys and its indentation; a one-line (flow style) section is replaced by ours; a
# missing one gets ours appended. Strings are written as YAML single-quoted strings; the interval is a
# duration the spec's pattern checked.
_MERGE = r"""
function q(s) { gsub(sq, sq sq, s); return sq s sq }
function ours(name, ind) {
  if (name == "cache") {
    print ind "enabled: true"
    print ind "external_server: " q(ENVIRON["GRS_CACHE_URL"])
    if (ENVIRON["GRS_CACHE_SECRET"] != "") print ind "external_secret: " q(ENVIRON["GRS_CACHE_SECRET"])
  } else {
    print ind "fetch_interval: " ENVIRON["GRS_FETCH_INTERVAL"]
    print ind "fetch_interval_max: " ENVIRON["GRS_FETCH_INTERVAL"]
  }
  done[name] = 1
}
function owned(name, line) {
  if (name == "cache") return line ~ /^[ \t]+(enabled|external_server|external_secret)[ \t]*:/
  return line ~ /^[ \t]+(fetch_interval|fetch_interval_max)[ \t]*:/
}
function leave() { if (block != "" && !done[block]) ours(block, "  "); block = "" }
BEGIN { want["runner"] = 1; if (ENVIRON["GRS_CACHE_URL"] != "") want["cache"] = 1 }
{ sub(/\r$/, "") }
/^[^ \t#]/ { leave() }
/^(runner|cache):/ {
  name = $0; sub(/:.*/, "", name)
  if (name in want) {
    if ($0 ~ /^[a-z]+:[ \t]*(#.*)?$/) { print; block = name; next }
    print name ":"; ours(name, "  "); next
  }
}
block != "" && /^[ \t]+[^ \t#]/ {
  if (!done[block]) { match($0, /^[ \t]+/); ours(block, substr($0, 1, RLENGTH)) }
  if (owned(block, $0)) next
}
{ print }
END { leave(); for (name in want) if (!done[name]) { print name ":"; ours(name, "  ") } }
"""

# POSIX sh for the prepare step (see `manifests.PREPARE_SCRIPT`), run in the state directory: it writes the
# merged config (readable by the runner's user only), which the runner container's `CONFIG_FILE` names.
WRITE_CONFIG = rf"""base="${{{CONFIG_FILE}:-/dev/null}}"
[ -r "$base" ] || {{ echo "registration failed: cannot read the runner config $base"; exit 1; }}
mkdir -p "${{{OUT_ENV}%/*}}" || exit 1
(umask 077 && awk -v "sq='" '{_MERGE}' "$base" >"${OUT_ENV}") || {{
  echo "registration failed: cannot write ${OUT_ENV}"
  exit 1
}}
unset {SECRET_ENV}
{CONFIG_FILE}="${OUT_ENV}"
"""
