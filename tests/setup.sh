#!/usr/bin/env bash
# Installs everything the tests, the sandbox and the demo need on a fresh Debian machine, and builds
# what cannot be installed: the Go-built peers and the container images (both cached outside the
# repository, so a second run takes seconds). Used by .ci/run, tests/e2e/sandbox.sh and the demo.
# Safe to re-run: every step is skipped when its result is already there.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
step() { printf '\n=== %s (%ss)\n' "$*" "$(( $(date +%s) - started ))"; }
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# redis-server and wrk: the tests' Redis (one server, a Cluster, and Sentinels: `redis-server --sentinel`,
# no other package) and the ingest benchmark's load generator. The rest runs
# the real node (containerd, runc, the CNI plugins, iptables for kube-proxy) and builds its images;
# prometheus brings promtool, which unit-tests the chart's alerts; docker-registry is the registry the
# Docker-mode workflows pull their job images from.
PACKAGES=(redis-server wrk containerd runc containernetworking-plugins iptables conntrack socat ethtool
          podman mmdebstrap uidmap fuse-overlayfs gcc libc6-dev openssl prometheus docker-registry)
step "system packages: ${PACKAGES[*]}"
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  as_root apt-get update -qq
  DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

step "Go-built peers (cached outside the repository)"
bash tests/peers/build.sh

step "container images (cached outside the repository)"
bash tests/images/build.sh

step "Python tooling: .venv with tox and the project"
if [ ! -x .venv/bin/tox ] || [ ! -x .venv/bin/reconciler ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q "tox>=4.11" -e '.[test]'
fi
step "setup done"
