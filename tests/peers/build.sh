#!/usr/bin/env bash
# Builds the real peers the tests talk to, from their Go modules, with this machine's Go and module
# proxy, and caches the binaries outside the repository, keyed by version.
#
#   tests/peers/build.sh [PEER...]     PEER: etcd kube (kube-apiserver + kube-controller-manager)
#                                           node (kubelet, kube-scheduler, kube-proxy) coredns
#                                           act_runner (1.x) act_runner0 (0.x) gitea helm kubeconform;
#                                           default: all of them
#   tests/peers/build.sh --print NAME  the path of one cached binary (built or not)
#   tests/peers/build.sh --wait NAME   the same, once a build that holds the cache's lock has ended
#   tests/peers/build.sh --await       only the waiting (tests/images/build.sh --wait uses it)
#   tests/peers/build.sh --lock        the path of that lock: .ci/run's late lane holds it while it builds
#                                      what no test needs at first (tests/setup.sh --late), and every
#                                      test asks for a binary with --wait, so it waits only if it needs one
#
# act_runner's module is refused by this workplace's module proxy: it is built from the source
# archive in ../shared/peers/ beside the checkout when `go install` fails.
#
# Prints the cache folder on its last line. A warm cache makes this a no-op.
set -euo pipefail

ETCD_VERSION=${ETCD_VERSION:-v3.6.8}
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
GITEA_VERSION=${GITEA_VERSION:-v1.26.0}
HELM_VERSION=${HELM_VERSION:-v3.20.2}
KUBECONFORM_VERSION=${KUBECONFORM_VERSION:-v0.7.0}
COREDNS_VERSION=${COREDNS_VERSION:-v1.14.7}
ACT_RUNNER_VERSION=${ACT_RUNNER_VERSION:-v1.0.8}
ACT_RUNNER_SHA256=${ACT_RUNNER_SHA256:-b3a03a1a98282769084d5d1a2181ebb81b823748238b89f18f27fd0b80520d4f}
# The last 0.x release, whose binary (and module) is still called act_runner: the older image shape.
ACT_RUNNER0_VERSION=v0.4.1
ACT_RUNNER0_SHA256=51d3369c4ad2ee14c11830f006541d6a52733a396a2fa3d4d82fcbf4775af40f
SHARED_PEERS=${GRS_SHARED_PEERS:-$(cd "$(dirname "$0")/../.." && pwd)/../shared/peers}

CACHE=${GRS_PEERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gitea-runner-scaler/peers}
BIN=$CACHE/bin
mkdir -p "$BIN" "$CACHE/src"
# No debug information (-dwarf=false here, -s -w in every -ldflags): the tests never debug a peer, and
# generating it is a good part of a cold build's compiling and most of its linking.
export GOFLAGS="-buildvcs=false -trimpath -gcflags=all=-dwarf=false" GOWORK=off CGO_ENABLED=${CGO_ENABLED:-1}
NODEBUG="-s -w"

say() { printf '[peers] (%ss) %s\n' "$SECONDS" "$*" >&2; }

# Unpacks a module into a writable folder of ours, so that its go.mod can be edited.
module_dir() {
  local mod=$1 ver=$2 dst=$CACHE/src/${1//\//_}@$2
  if [ ! -f "$dst/.complete" ]; then
    local dir
    dir=$(go mod download -json "$mod@$ver" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
    rm -rf "$dst"
    cp -r "$dir" "$dst"
    chmod -R u+w "$dst"
    touch "$dst/.complete"
  fi
  printf '%s\n' "$dst"
}

have() { [ -x "$BIN/$1" ]; }

build_etcd() {
  have "etcd-$ETCD_VERSION" && return
  say "building etcd $ETCD_VERSION (about 2 minutes cold)"
  local dir
  dir=$(module_dir go.etcd.io/etcd/server/v3 "$ETCD_VERSION")
  (
    cd "$dir"
    # The module's replace directives point at sibling folders the zip lacks: use the published modules.
    for r in $(go mod edit -json | python3 -c 'import json,sys; print(" ".join(r["Old"]["Path"] for r in json.load(sys.stdin).get("Replace") or [] if r["New"]["Path"].startswith("../")))'); do
      go mod edit -dropreplace="$r" -require="$r@$ETCD_VERSION"
    done
    go build -mod=mod -ldflags "$NODEBUG" -o "$BIN/etcd-$ETCD_VERSION.tmp" .
  )
  mv "$BIN/etcd-$ETCD_VERSION.tmp" "$BIN/etcd-$ETCD_VERSION"
}

# The k8s.io/kubernetes module, unpacked and made buildable: its go.mod replaces every k8s.io
# staging module with ./staging/src/..., which the module zip lacks; use the published modules.
kube_dir() {
  local dir staging
  dir=$(module_dir k8s.io/kubernetes "$KUBE_VERSION")
  staging="v0.${KUBE_VERSION#v1.}"
  if [ ! -f "$dir/.staging-replaced" ]; then
    (
      cd "$dir"
      for r in $(go mod edit -json | python3 -c 'import json,sys; print(" ".join(r["Old"]["Path"] for r in json.load(sys.stdin).get("Replace") or [] if r["New"]["Path"].startswith("./staging")))'); do
        go mod edit -replace="$r=$r@$staging"
      done
    )
    touch "$dir/.staging-replaced"
  fi
  printf '%s\n' "$dir"
}

# The version flags of Kubernetes's own release builds (hack/lib/version.sh): without them every
# component says v0.0.0-master, and `helm install` refuses a chart's kubeVersion against it.
kube_version_flags() {
  local minor=${KUBE_VERSION#v1.} pkg flags=$NODEBUG
  minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  printf '%s\n' "$flags"
}

# build_kube_cmds CMD...: ./cmd/CMD of the kubernetes module, each cached as CMD-$KUBE_VERSION-r2, in
# one `go build` (a command's link runs while the next one's packages compile).
build_kube_cmds() {
  local dir cmd out=$BIN/kube-$KUBE_VERSION.tmp missing=()
  for cmd in "$@"; do
    have "$cmd-$KUBE_VERSION-r2" || missing+=("./cmd/$cmd")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  dir=$(kube_dir)
  say "building ${missing[*]#./cmd/} $KUBE_VERSION"
  rm -rf "$out" && mkdir -p "$out"
  (cd "$dir" && go build -mod=mod -ldflags "$(kube_version_flags)" -o "$out/" "${missing[@]}")
  for cmd in "${missing[@]#./cmd/}"; do
    mv "$out/$cmd" "$BIN/$cmd-$KUBE_VERSION-r2"
  done
  rm -rf "$out"
}

build_gitea() {
  have "gitea-$GITEA_VERSION" && return
  say "building gitea $GITEA_VERSION with sqlite (about 8 minutes cold)"
  local dir
  dir=$(module_dir code.gitea.io/gitea "$GITEA_VERSION")
  (
    cd "$dir"
    go build -mod=mod -tags 'sqlite sqlite_unlock_notify' \
      -ldflags "$NODEBUG -X main.Version=${GITEA_VERSION#v}" -o "$BIN/gitea-$GITEA_VERSION.tmp" .
  )
  mv "$BIN/gitea-$GITEA_VERSION.tmp" "$BIN/gitea-$GITEA_VERSION"
  # Gitea reads its templates, options and public files from its work path when built without bindata.
  rm -rf "$CACHE/gitea-$GITEA_VERSION-share"
  mkdir -p "$CACHE/gitea-$GITEA_VERSION-share"
  cp -r "$dir/templates" "$dir/options" "$dir/public" "$CACHE/gitea-$GITEA_VERSION-share/"
}

build_go_install() {
  local name=$1 pkg=$2 ver=$3
  have "$name-$ver" && return
  say "building $name $ver"
  GOBIN="$CACHE/gobin-$name" go install -ldflags "$NODEBUG" "$pkg@$ver"
  mv "$CACHE/gobin-$name/$name" "$BIN/$name-$ver"
}

# CoreDNS with the plugins the test node's Corefile uses and no others (tests/peers/coredns/main.go),
# built inside the release's module: the same code and dependencies, a third of the compiling.
build_coredns() {
  local name="coredns-$COREDNS_VERSION-min"
  have "$name" && return
  say "building coredns $COREDNS_VERSION (the test node's plugins)"
  local dir
  dir=$(module_dir github.com/coredns/coredns "$COREDNS_VERSION")
  rm -rf "$dir/grs-min" && mkdir "$dir/grs-min"
  cp "$(dirname "$0")/coredns/main.go" "$dir/grs-min/main.go"
  (cd "$dir" && go build -mod=mod -ldflags "$NODEBUG" -o "$BIN/$name.tmp" ./grs-min)
  mv "$BIN/$name.tmp" "$BIN/$name"
}

# helm with the flags of its release builds: its version, and the Kubernetes version its client-go
# speaks as the default of `helm template` (without them that default is v1.20.0, older than any cluster
# our chart supports, and `kubeVersion` refuses to render).
build_helm() {
  local name="helm-$HELM_VERSION-r2"
  have "$name" && return
  say "building helm $HELM_VERSION"
  local dir client major minor
  dir=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  client=$(awk '$1 == "k8s.io/client-go" {print $2}' "$dir/go.mod")  # v0.35.1 -> Kubernetes 1.35
  major=$(( $(echo "$client" | cut -d. -f1 | tr -d v) + 1 ))
  minor=$(echo "$client" | cut -d. -f2)
  local ldflags="$NODEBUG -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
  local pkg
  for pkg in pkg/lint/rules pkg/chartutil; do
    ldflags+=" -X helm.sh/helm/v3/$pkg.k8sVersionMajor=$major -X helm.sh/helm/v3/$pkg.k8sVersionMinor=$minor"
  done
  GOBIN="$CACHE/gobin-helm" go install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
  mv "$CACHE/gobin-helm/helm" "$BIN/$name"
}

# act_runner: `go install` where the module proxy serves it, else the source archive in shared/.
#   build_act_runner NAME VERSION SHA256 MODULE
build_act_runner() {
  local name="$1-$2" version=$2 sha256=$3 module=$4
  have "$name" && return
  say "building $1 $version (about 3 minutes cold)"
  local ldflags="$NODEBUG -X $module/internal/pkg/ver.version=$version"
  if GOBIN="$CACHE/gobin-$name" go install -ldflags "$ldflags" "$module@$version" 2>/dev/null; then
    mv "$CACHE/gobin-$name/${module##*/}" "$BIN/$name"
    return
  fi
  local archive="$SHARED_PEERS/act_runner-$version.tar.gz"
  say "the module proxy does not serve $module; building it from $archive"
  [ -f "$archive" ] || { say "missing $archive (shared/peers beside the checkout)"; exit 1; }
  echo "$sha256  $archive" | sha256sum -c --quiet - || { say "checksum mismatch: $archive"; exit 1; }
  rm -rf "$CACHE/src/act_runner-$version"
  tar -xzf "$archive" -C "$CACHE/src"
  (cd "$CACHE/src/act_runner-$version" && go build -mod=mod -ldflags "$ldflags" -o "$BIN/$name.tmp" .)
  mv "$BIN/$name.tmp" "$BIN/$name"
}

LOCK=$CACHE/late-peers.lock
# Returns once no build holds the lock exclusively (none does on a warm cache): a shared lock is granted.
await_late() { touch "$LOCK"; flock --shared --timeout 3600 "$LOCK" true; }
case ${1:-} in
  --lock) echo "$LOCK"; exit 0 ;;
  --await) await_late; exit 0 ;;  # for tests/images/build.sh --wait
  --wait)
    path=$(bash "$0" --print "${2:-}")
    [ -x "$path" ] || await_late
    set -- --print "${2:-}" ;;
esac
if [ "${1:-}" = "--print" ]; then
  # tests/peers/build.sh --print NAME: the cached binary's path for the configured version.
  case ${2:-} in
    etcd) echo "$BIN/etcd-$ETCD_VERSION" ;;
    kube-apiserver|kube-controller-manager|kubelet|kube-scheduler|kube-proxy) echo "$BIN/$2-$KUBE_VERSION-r2" ;;
    coredns) echo "$BIN/coredns-$COREDNS_VERSION-min" ;;
    act_runner) echo "$BIN/act_runner-$ACT_RUNNER_VERSION" ;;
    act_runner0) echo "$BIN/act_runner0-$ACT_RUNNER0_VERSION" ;;
    gitea) echo "$BIN/gitea-$GITEA_VERSION" ;;
    gitea-share) echo "$CACHE/gitea-$GITEA_VERSION-share" ;;
    helm) echo "$BIN/helm-$HELM_VERSION-r2" ;;
    kubeconform) echo "$BIN/kubeconform-$KUBECONFORM_VERSION" ;;
    *) say "unknown binary: ${2:-}"; exit 2 ;;
  esac
  exit 0
fi

peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=(etcd kube node coredns act_runner act_runner0 gitea helm kubeconform)
for p in "${peers[@]}"; do
  case $p in
    etcd) build_etcd ;;
    kube|node)  # both at once when both are asked for
      cmds=()
      [[ " ${peers[*]} " != *" kube "* ]] || cmds+=(kube-apiserver kube-controller-manager)
      [[ " ${peers[*]} " != *" node "* ]] || cmds+=(kubelet kube-scheduler kube-proxy)
      build_kube_cmds "${cmds[@]}" ;;
    coredns) build_coredns ;;
    act_runner) build_act_runner act_runner "$ACT_RUNNER_VERSION" "$ACT_RUNNER_SHA256" gitea.com/gitea/runner ;;
    act_runner0) build_act_runner act_runner0 "$ACT_RUNNER0_VERSION" "$ACT_RUNNER0_SHA256" gitea.com/gitea/act_runner ;;
    gitea) build_gitea ;;
    helm) build_helm ;;
    kubeconform) build_go_install kubeconform github.com/yannh/kubeconform/cmd/kubeconform "$KUBECONFORM_VERSION" ;;
    *) say "unknown peer: $p"; exit 2 ;;
  esac
done
printf '%s\n' "$BIN"
