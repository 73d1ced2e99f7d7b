"""Pure: the shared cache every runner uses (act_runner's `cache-server`, which the chart can run), and
the runner config the register step writes for it.

Owns: `RunnerCache` (the server's URL, the secret the server shares with its runners, and the Secret
the controller keeps it in, in each runner namespace), the env it gives a runner
Pod's containers, and `WRITE_CONFIG`, the POSIX sh and awk that merge the cache settings into the
runner's own config (the image's or the podTemplate's `CONFIG_FILE`, or none) on the state volume.

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

    def register_env(self, state_dir: str) -> list[dict[str, Any]]:
        """The register step's: the URL, the secret (by reference), and where to write the config."""
        env: list[dict[str, Any]] = [
            {"name": URL_ENV, "value": self.url},
            {"name": OUT_ENV, "value": config_path(state_dir)},
        ]
        if self.secret:
            ref = {"name": self.secret_name, "key": SECRET_KEY}
            env.append({"name": SECRET_ENV, "valueFrom": {"secretKeyRef": ref}})
        return env

    def runner_env(self, state_dir: str) -> list[dict[str, Any]]:
        """The runner container's: the merged config in place of its own."""
        return [{"name": CONFIG_FILE, "value": config_path(state_dir)}]


# awk: the base config (CRLF or LF) with `cache:` set to ours. A block `cache:` keeps its other keys and its
# indentation, losing only enabled / external_server / external_secret; a one-line `cache:` (flow
# style) is replaced; none at all gets ours appended. Values are written as YAML single-quoted strings.
_MERGE = r"""
function q(s) { gsub(sq, sq sq, s); return sq s sq }
function ours(ind) {
  print ind "enabled: true"
  print ind "external_server: " q(ENVIRON["GRS_CACHE_URL"])
  if (ENVIRON["GRS_CACHE_SECRET"] != "") print ind "external_secret: " q(ENVIRON["GRS_CACHE_SECRET"])
  done = 1
}
{ sub(/\r$/, "") }
/^cache:[ \t]*(#.*)?$/ { print; block = 1; next }
/^cache:/ { print "cache:"; ours("  "); next }
block && /^[^ \t#]/ { if (!done) ours("  "); block = 0 }
block && /^[ \t]+[^ \t#]/ {
  if (!done) { match($0, /^[ \t]+/); ours(substr($0, 1, RLENGTH)) }
  if ($0 ~ /^[ \t]+(enabled|external_server|external_secret)[ \t]*:/) next
}
{ print }
END { if (!done) { if (!block) print "cache:"; ours("  ") } }
"""

# POSIX sh for the register step (see `manifests.REGISTER_SCRIPT`), run in the state directory: it
# writes the merged config (readable by the runner's user only) and registers with it.
WRITE_CONFIG = rf"""if [ -n "${{{URL_ENV}:-}}" ]; then
  base="${{{CONFIG_FILE}:-/dev/null}}"
  [ -r "$base" ] || {{ echo "registration failed: cannot read the runner config $base"; exit 1; }}
  mkdir -p "${{{OUT_ENV}%/*}}" || exit 1
  (umask 077 && awk -v "sq='" '{_MERGE}' "$base" >"${OUT_ENV}") || {{
    echo "registration failed: cannot write ${OUT_ENV}"
    exit 1
  }}
  unset {SECRET_ENV}
  {CONFIG_FILE}="${OUT_ENV}"
fi
"""
