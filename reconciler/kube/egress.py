"""Pure: the way out to Gitea, for the reconciler and its runners: CA certificates to trust, and proxies;
and the shared cache the runners use, if the install has one (`runner_cache`).

Owns: `Egress` (read once at start by `__main__`: `GRS_GITEA_CA_FILE`, the reconciler's own
HTTP_PROXY, HTTPS_PROXY and NO_PROXY, and `GRS_RUNNER_CACHE_*`), the env it gives a runner Pod's
containers, and where the runner's CA files are. The certificates travel in the register container's
env (they are public) and the register step writes them, with the image's own bundle, onto the
runner's state volume; the env then points every client a runner runs at them: Go's (act_runner's
registration, fetches and `uses:` clones), git, curl, Python's requests, and node (which adds rather
than replaces). Must not do I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from reconciler.kube.runner_cache import RunnerCache

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")
CA_ENV = "GRS_CA_CERTS"  # the register step's copy of the certificates (PEM)
CA_DIR_ENV = "GRS_CA_DIR"
# The image bundle plus ours, and ours alone (for clients that add to their own, like node's).
_BUNDLE, _EXTRA = "ca-certificates.crt", "extra-ca.crt"
_BUNDLE_VARS = ("SSL_CERT_FILE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE", "REQUESTS_CA_BUNDLE")
_EXTRA_VARS = ("NODE_EXTRA_CA_CERTS",)


@dataclass(frozen=True, slots=True)
class Egress:
    """CA certificates (PEM, "" for none), proxy settings ((name, value), upper-case names), and the
    shared cache (None for none)."""

    ca_pem: str = ""
    proxy: tuple[tuple[str, str], ...] = ()
    cache: RunnerCache | None = None

    @classmethod
    def of(cls, *, ca_pem: str = "", environ: Mapping[str, str], cache: RunnerCache | None = None) -> Egress:
        """From the certificates and a process environment (a proxy variable in either case)."""
        proxy = []
        for name in PROXY_VARS:
            value = environ.get(name) or environ.get(name.lower()) or ""
            if value:
                proxy.append((name, value))
        return cls(ca_pem=ca_pem.strip(), proxy=tuple(proxy), cache=cache)

    @property
    def digest(self) -> str:
        """A short digest of what runners get ("" when they get nothing), for the template hash."""
        if not self:
            return ""
        text = self.ca_pem + "".join(f"\n{k}={v}" for k, v in self.proxy)
        if self.cache:
            text += f"\ncache={self.cache.digest}"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def __bool__(self) -> bool:
        return bool(self.ca_pem or self.proxy or self.cache)

    def proxy_env(self) -> list[dict[str, Any]]:
        """The proxy variables, in both cases (curl and git read only the lower-case ones)."""
        return [{"name": n, "value": v} for name, v in self.proxy for n in (name, name.lower())]

    def ca_env(self, state_dir: str) -> list[dict[str, Any]]:
        """What points a container's TLS clients at the CA files under `state_dir`."""
        if not self.ca_pem:
            return []
        ca_dir = f"{state_dir}/.ca"
        return [
            *({"name": n, "value": f"{ca_dir}/{_BUNDLE}"} for n in _BUNDLE_VARS),
            *({"name": n, "value": f"{ca_dir}/{_EXTRA}"} for n in _EXTRA_VARS),
        ]

    def register_env(self, state_dir: str) -> list[dict[str, Any]]:
        """The register step's: the certificates to write, where, the rest as the runner's, and the
        cache settings to write into the runner's config."""
        cache = self.cache.register_env() if self.cache else []
        if not self.ca_pem:
            return self.proxy_env() + cache
        written = [{"name": CA_ENV, "value": self.ca_pem}, {"name": CA_DIR_ENV, "value": f"{state_dir}/.ca"}]
        return [*written, *self.ca_env(state_dir), *self.proxy_env(), *cache]


DIRECT = Egress()  # no CA certificates of our own, no proxy


def owned_names(egress: Egress, state_dir: str) -> frozenset[str]:
    """The env names `egress` sets on the runner container, upper-cased."""
    return frozenset(e["name"].upper() for e in egress.ca_env(state_dir) + egress.proxy_env())


# POSIX sh for the register step (see `manifests.REGISTER_SCRIPT`): the image's CA bundle (Debian's,
# Alpine's or Red Hat's path) with ours appended, and ours alone.
WRITE_CA = rf"""if [ -n "${{{CA_ENV}:-}}" ]; then
  mkdir -p "${CA_DIR_ENV}" || exit 1
  printf '%s\n' "${CA_ENV}" >"${CA_DIR_ENV}/{_EXTRA}"
  system=
  for f in /etc/ssl/certs/ca-certificates.crt /etc/ssl/cert.pem /etc/pki/tls/certs/ca-bundle.crt; do
    if [ -f "$f" ]; then system=$f; break; fi
  done
  cat $system "${CA_DIR_ENV}/{_EXTRA}" >"${CA_DIR_ENV}/{_BUNDLE}" || exit 1
  unset {CA_ENV}
fi
"""
