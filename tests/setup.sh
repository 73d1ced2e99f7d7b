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

# The rest runs at once, each part into a log of its own: the Go-built peers (mostly compiling: etcd
# and Kubernetes in one part, the others in another), the
# images (mostly downloading Debian packages and PyPI wheels) and the Python tooling. The images that
# carry act_runner wait for its build only; the others, and the venv, need no peer.
#
# What no test needs in its first minutes is built last: Helm and kubeconform, act_runner 0.x, the
# images of the upstream runners and the previous release. `tests/setup.sh --late` builds only those
# (.ci/run does, in a lane of its own, while its test lanes run: a test that reaches one of them first
# waits for that build, tests/peers/build.sh --wait); with GRS_SETUP_LATE=later the setup leaves them
# out; by default it builds everything.
LATE_PEERS=(helm kubeconform act_runner0)
LATE_IMAGES=(upstream0 upstream1 rootless previous)
if [ "${1:-}" = "--late" ]; then
  # Helm and kubeconform first (the tests lane renders the chart some minutes in), then the rest at a
  # lower priority: on 2 cores it slowed the node lane, the long pole, which needs it 13 minutes in.
  step "the late parts: peers ${LATE_PEERS[*]}, images ${LATE_IMAGES[*]}"
  bash tests/peers/build.sh helm kubeconform
  nice -n 10 bash tests/peers/build.sh "${LATE_PEERS[@]}"
  nice -n 10 bash tests/images/build.sh "${LATE_IMAGES[@]}"
  step "late parts done"
  exit 0
fi
kube_peers=(etcd kube node) other_peers=(coredns gitea) runner_images=(runner) other_images=(pause scaler redis docker)
runner_peers=(act_runner)
if [ "${GRS_SETUP_LATE:-}" != later ]; then
  other_peers+=(helm kubeconform) runner_peers+=(act_runner0) runner_images+=(upstream0 upstream1 rootless)
  other_images+=(previous)
fi
logs=$(mktemp -d "${TMPDIR:-/tmp}/grs-setup.XXXXXX")
declare -A part_of=()
part() {  # part NAME COMMAND...: run in the background, output in $logs/NAME.log
  local name=$1
  shift
  "$@" >"$logs/$name.log" 2>&1 &
  part_of[$!]=$name
}
runner_peers_then_images() {
  bash tests/peers/build.sh "${runner_peers[@]}"
  bash tests/images/build.sh "${runner_images[@]}"
}
# The venv with tox and the project, and tox's environments made ready (`--notest`): the test lanes of
# .ci/run share the `tests` environment and must not install into it at once.
python_tooling() {
  if [ ! -x .venv/bin/tox ] || [ ! -x .venv/bin/reconciler ]; then
    python3 -m venv .venv
    .venv/bin/pip install -q --upgrade pip
    .venv/bin/pip install -q "tox>=4.11" -e '.[test]'
  fi
  .venv/bin/tox run -e lint,types,docs,tests --notest
}
step "at once: the Go-built peers, the images (both cached outside the repository), .venv and tox's environments (logs in $logs)"
# Two parts compile peers side by side: one `go build` alone leaves a core idle while it links.
part kube-peers bash tests/peers/build.sh "${kube_peers[@]}"
part other-peers bash tests/peers/build.sh "${other_peers[@]}"
part runner-peers-and-images runner_peers_then_images
part images bash tests/images/build.sh "${other_images[@]}"
part python python_tooling
failed=()
while [ ${#part_of[@]} -gt 0 ]; do
  rc=0
  wait -n -p done_pid "${!part_of[@]}" || rc=$?
  name=${part_of[$done_pid]}
  unset "part_of[$done_pid]"
  if [ "$rc" -eq 0 ]; then step "$name: done"; else step "$name: FAILED (exit $rc)"; failed+=("$name"); fi
  cat "$logs/$name.log"
done
if [ ${#failed[@]} -gt 0 ]; then
  step "setup failed: ${failed[*]} (logs in $logs)"
  exit 1
fi
rm -rf "$logs"
step "setup done"
