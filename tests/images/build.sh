#!/usr/bin/env bash
# Builds the OCI images the tests run on a node, with Debian's podman and mmdebstrap (no Docker
# engine, no registry), and caches them outside the repository as oci-archive tars, keyed by
# their inputs.
#
#   tests/images/build.sh [IMAGE...]      IMAGE: pause runner scaler redis docker upstream0 upstream1
#                                         rootless previous (the scaler image of the release in
#                                         tests/images/previous-release, from git: the upgrade test's);
#                                         default: all of them
#   tests/images/build.sh --print IMAGE   the path of the image's cached oci-archive tar (built or not)
#   tests/images/build.sh --wait IMAGE    the same, once a build that holds the peers cache's lock
#                                         (tests/peers/build.sh --lock: .ci/run's late lane) has ended
#   tests/images/build.sh --ref IMAGE     the reference (name:tag) the Pod specs must use
#
#   GRS_IMAGES_CACHE           the cache folder (default ~/.cache/gitea-runner-scaler/images)
#   GRS_ACT_RUNNER_BIN         the runner's act_runner (default: tests/peers/build.sh --print act_runner)
#   ACT_RUNNER_VERSION         its version, the runner image's tag (default v1.0.8)
#   GRS_SHARED_PEERS           the shared test peers (default ../shared/peers beside the checkout):
#                              the upstream images take their scripts/run.sh from act_runner's archives
#   GRS_RUNNER_EXTRA_PACKAGES  Debian packages to add to the runner's base, comma separated (e.g. git)
#   GRS_DEBIAN_SOURCES         apt sources for bookworm (default: this machine's)
#
# Needs the Debian packages podman, mmdebstrap, uidmap, fuse-overlayfs, gcc and libc6-dev, and root.
# Prints progress on stderr and the cache folder on its last line. A warm cache makes this a no-op
# that starts no podman. Podman's state (storage, configuration, temporary files) stays in the cache.
set -euo pipefail
shopt -s inherit_errexit

ACT_RUNNER_VERSION=${ACT_RUNNER_VERSION:-v1.0.8}
DEBIAN_RELEASE=bookworm
# The upstream series of bookworm's redis-server, the redis image's tag: the build checks it.
REDIS_VERSION=7.0
IMAGES=(pause runner scaler redis docker upstream0 upstream1 rootless previous)

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SHARED_PEERS=${GRS_SHARED_PEERS:-$ROOT/../shared/peers}
# The commit of the release before this one: the upgrade test installs its chart and image first.
PREVIOUS_RELEASE=$(cat "$HERE/previous-release")
CACHE=${GRS_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gitea-runner-scaler/images}
PODMAN_DIR=$CACHE/podman
mkdir -p "$CACHE/base" "$CACHE/tmp"

say() { printf '[images] %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

# The first 12 hex digits of the sha256 of standard input: every key and content tag.
digest() { sha256sum | cut -c1-12; }

# --- The two Debian bases ------------------------------------------------------------------------
# mmdebstrap's arguments are the bases' inputs, with the release: their key. `slim` is what
# debian:bookworm-slim and python:3.11-slim share (no man pages, docs or translations; usr merged
# by a hook rather than by the usrmerge package, which would bring in perl).
SLIM=(--variant=minbase --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright' --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-exclude=/usr/share/info/*')
# A stand-in for docker.io/library/python:3.11-slim (bookworm's python3 is 3.11). The two lists are
# read by name (local -n); the hook's $1 is expanded by mmdebstrap.
# shellcheck disable=SC2016,SC2034,SC2054
PYTHON_BASE=("${SLIM[@]}" --include=python3,python3-venv,ca-certificates,netbase,tzdata
  --customize-hook='ln -sf /usr/bin/python3 "$1/usr/local/bin/python3"')
# debian:bookworm-slim with the runner's needs: CA certificates for Gitea over TLS, tini as PID 1.
# shellcheck disable=SC2034
RUNNER_BASE=("${SLIM[@]}" --include="ca-certificates,tini${GRS_RUNNER_EXTRA_PACKAGES:+,$GRS_RUNNER_EXTRA_PACKAGES}")
# debian:bookworm-slim with Debian's Redis: the chart's bundled Redis runs redis-server and probes
# with redis-cli (redis-tools), both through /bin/sh.
# shellcheck disable=SC2034,SC2054
REDIS_BASE=("${SLIM[@]}" --include=redis-server,redis-tools)
# Docker's daemon and CLI (docker.io; bookworm has no separate CLI package) with what dockerd needs
# in a container (iptables, procps), and what a job image needs (nodejs for JavaScript actions,
# git, curl): the dind sidecar and the job image of the Docker-mode tests are one image.
# shellcheck disable=SC2034
UPSTREAM_BASE=("${SLIM[@]}" --include=ca-certificates,tini,bash,git,tzdata)
# A rootless Docker daemon (rootlesskit with slirp4netns, the setuid newuidmap of uidmap,
# fuse-overlayfs), s6 supervising it and act_runner, as the upstream dind-rootless image has them.
# shellcheck disable=SC2034
ROOTLESS_BASE=("${SLIM[@]}" --include=docker.io,rootlesskit,slirp4netns,uidmap,iptables,iproute2,fuse-overlayfs,s6,bash,git,tzdata,ca-certificates,procps)
# shellcheck disable=SC2034
DOCKER_BASE=("${SLIM[@]}" --include=docker.io,iptables,procps,ca-certificates,nodejs,git,curl)

base_key() {
  local -n opts=$1
  printf '%s\n' "$DEBIAN_RELEASE" "${opts[@]}" | digest
}

# Builds the base NAME's rootfs tar once per machine and imports it into podman's storage;
# prints its reference there.
ensure_base() {
  local name=$1 key tar ref sources
  local -n opts=$2
  key=$(base_key "$2")
  tar=$CACHE/base/$name-$key.tar
  ref=localhost/grs/base-$name:$key
  if [ ! -f "$tar" ]; then
    sources=${GRS_DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}
    [ -f "$sources" ] || sources=/etc/apt/sources.list
    grep -qw "$DEBIAN_RELEASE" "$sources" ||
      die "$sources has no $DEBIAN_RELEASE suite: set GRS_DEBIAN_SOURCES to apt sources for it"
    say "mmdebstrap: base $name ($DEBIAN_RELEASE, about 40 s)"
    rm -f "$CACHE/base/$name-"*
    quietly mmdebstrap --format=tar "${opts[@]}" "$DEBIAN_RELEASE" "$tar.tmp" "$sources"
    mv "$tar.tmp" "$tar"
  fi
  if ! podman image exists "$ref"; then
    say "importing base $name"
    # An import sets no PATH: give the one Debian's and Docker's images have.
    podman import --quiet \
      --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'ENV LANG=C.UTF-8' "$tar" "$ref" >/dev/null
    drop_other_tags "localhost/grs/base-$name" "$ref"
  fi
  printf '%s\n' "$ref"
}

# --- Keys: each image's inputs, hashed -----------------------------------------------------------
act_runner_bin() {
  if [ -n "${GRS_ACT_RUNNER_BIN:-}" ]; then
    printf '%s\n' "$GRS_ACT_RUNNER_BIN"
  else
    bash "$ROOT/tests/peers/build.sh" --print act_runner ||
      die "no act_runner: set GRS_ACT_RUNNER_BIN, or add act_runner to tests/peers/build.sh"
  fi
}

# The two upstream image shapes: act_runner 0.x (binary act_runner) and 1.x (binary gitea-runner).
upstream_peer() { case $1 in upstream0) echo act_runner0 ;; *) echo act_runner ;; esac; }
upstream_binary() { case $1 in upstream0) echo act_runner ;; *) echo gitea-runner ;; esac; }
upstream_bin() { bash "$ROOT/tests/peers/build.sh" --print "$(upstream_peer "$1")"; }
upstream_version() { local bin; bin=$(upstream_bin "$1"); echo "${bin##*-}"; }  # .../act_runner0-v0.4.1
# The release's own scripts/run.sh, from its source archive (not a copy in this repository).
upstream_run_sh() {
  local archive
  archive=$SHARED_PEERS/act_runner-$(upstream_version "$1").tar.gz
  [ -f "$archive" ] || die "missing $archive (the shared test peers, beside the checkout)"
  tar -xzOf "$archive" "act_runner-$(upstream_version "$1")/scripts/run.sh"
}

# The release's scripts/s6 tree (the dind images' supervision), into folder $2.
upstream_s6() {
  local archive version
  version=$(upstream_version "$1")
  archive=$SHARED_PEERS/act_runner-$version.tar.gz
  tar -xzf "$archive" -C "$2" --strip-components=2 "act_runner-$version/scripts/s6"
}

# The files the scaler image is built from: what the Dockerfile copies, tracked or not (a
# developer's work tree counts), minus what git ignores.
scaler_inputs() {
  (
    cd "$ROOT"
    printf '%s\n' Dockerfile pyproject.toml README.md deploy/image-install.sh
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      git ls-files --cached --others --exclude-standard -- webhook_scaler reconciler
    else
      find webhook_scaler reconciler -type f ! -path '*/__pycache__/*'
    fi
  ) | LC_ALL=C sort -u | while IFS= read -r f; do
    # A tracked file deleted in the work tree is not copied into the image either.
    if [ -f "$ROOT/$f" ]; then printf '%s\n' "$f"; fi
  done
}

key_of() {
  case $1 in
    pause)
      { cat "$HERE/pause/pause.c" "$HERE/pause/Containerfile"; gcc -dumpfullversion; } | digest ;;
    runner)
      local bin
      bin=$(act_runner_bin)
      [ -f "$bin" ] || die "no act_runner at $bin: build it first (tests/peers/build.sh act_runner)"
      { printf '%s\n' "$ACT_RUNNER_VERSION" "$(base_key RUNNER_BASE)"; sha256sum <"$bin"
        cat "$HERE/runner/Containerfile" "$HERE/runner/run.sh" "$HERE/runner/config.yaml"; } | digest ;;
    scaler)
      local files
      mapfile -t files < <(scaler_inputs)
      { base_key PYTHON_BASE; cd "$ROOT" && sha256sum -- "${files[@]}"; } | digest ;;
    previous)
      { base_key PYTHON_BASE; echo "$PREVIOUS_RELEASE"; } | digest ;;
    redis)
      { printf '%s\n' "$REDIS_VERSION" "$(base_key REDIS_BASE)"; cat "$HERE/redis/Containerfile"; } | digest ;;
    docker)
      { base_key DOCKER_BASE; cat "$HERE/docker/Containerfile" "$HERE/docker/entrypoint.sh"; } | digest ;;
    upstream0|upstream1)
      local bin
      bin=$(upstream_bin "$1")
      [ -f "$bin" ] || die "no ${1} runner at $bin: build it first (tests/peers/build.sh $(upstream_peer "$1"))"
      { base_key UPSTREAM_BASE; sha256sum <"$bin"; upstream_run_sh "$1"; cat "$HERE/upstream/Containerfile"; } | digest ;;
    rootless)
      local bin
      bin=$(upstream_bin upstream0)
      [ -f "$bin" ] || die "no 0.x runner at $bin: build it first (tests/peers/build.sh act_runner0)"
      { base_key ROOTLESS_BASE; sha256sum <"$bin"; upstream_run_sh upstream0
        tar -xzOf "$SHARED_PEERS/act_runner-$(upstream_version upstream0).tar.gz" --wildcards '*/scripts/s6/*'
        cat "$HERE/rootless/Containerfile" "$HERE/rootless/dockerd-entrypoint.sh" "$HERE/rootless/daemon.json"; } | digest ;;
    *) die "unknown image: $1 (${IMAGES[*]})" ;;
  esac
}

ref_of() {
  case $1 in
    pause) echo localhost/grs/pause:3.10 ;;
    runner) echo "localhost/grs/act-runner:$ACT_RUNNER_VERSION" ;;
    scaler) local key; key=$(key_of scaler); echo "localhost/grs/gitea-runner-scaler:$key" ;;
    previous) echo "localhost/grs/gitea-runner-scaler:previous-${PREVIOUS_RELEASE:0:12}" ;;
    redis) echo "localhost/grs/redis:$REDIS_VERSION-$DEBIAN_RELEASE" ;;
    docker) local key; key=$(key_of docker); echo "localhost/grs/docker:$key" ;;
    upstream0|upstream1) echo "localhost/grs/act-runner-upstream:$(upstream_version "$1")" ;;
    # The RunnerGroup's default image, by its own name: a group that names no image runs it.
    rootless) echo docker.io/gitea/act_runner:0.2.13-dind-rootless ;;
    *) die "unknown image: $1 (${IMAGES[*]})" ;;
  esac
}

tar_of() {
  local key
  key=$(key_of "$1")
  printf '%s/%s-%s.tar\n' "$CACHE" "$1" "$key"
}

# --- Podman, with all of its state in the cache --------------------------------------------------
setup_podman() {
  mkdir -p "$PODMAN_DIR"/{storage,run,tmp,cni}
  # The run and tmp folders hold per-boot state (mounts, locks) that podman expects on a tmpfs.
  local boot
  boot=$(cat /proc/sys/kernel/random/boot_id)
  if [ "$(cat "$PODMAN_DIR/boot_id" 2>/dev/null)" != "$boot" ]; then
    rm -rf "${PODMAN_DIR:?}/run" "${PODMAN_DIR:?}/tmp"
    mkdir -p "$PODMAN_DIR/run" "$PODMAN_DIR/tmp"
    echo "$boot" >"$PODMAN_DIR/boot_id"
  fi
  # /etc and /var are read-only in our mount namespace, so nothing can keep state there unseen.
  # Podman keeps some state in /var whatever its settings say: its copy code a blob-info cache in
  # /var/lib/containers/cache (it falls back to an in-memory one), its short-name lookup a lock in
  # /var/cache/containers (it fails without one), buildah some temporary files in /var/tmp (it
  # ignores TMPDIR there). The last two get folders of the cache's scratch folder, which is
  # emptied first: a build that was killed may have left it full.
  rm -rf "${CACHE:?}/tmp"
  mkdir -p "$CACHE/tmp/var-cache"
  # Our mounts' and mmdebstrap's bookkeeping, which libmount would keep in /run/mount.
  export LIBMOUNT_UTAB=$CACHE/tmp/utab
  mount -n --rbind -o ro /etc /etc
  mount -n --rbind -o ro /var /var
  mount -n --bind "$CACHE/tmp" /var/tmp
  mount -n --bind "$CACHE/tmp/var-cache" /var/cache
  mount -n --bind "$CACHE" "$CACHE"  # writable even where it lies under /var
  # The kernel's overlayfs cannot sit on another overlayfs (a cache inside a container).
  local mount_program=
  [ "$(stat -f -c %T "$PODMAN_DIR/storage")" != overlayfs ] ||
    mount_program='mount_program = "/usr/bin/fuse-overlayfs"'
  cat >"$PODMAN_DIR/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$PODMAN_DIR/storage"
runroot = "$PODMAN_DIR/run"
[storage.options.overlay]
$mount_program
EOF
  # Nothing is ever pulled: a base that is missing locally must fail at once, not after a timeout.
  # The Dockerfile's short name python:3.11-slim resolves through the alias.
  cat >"$PODMAN_DIR/registries.conf" <<EOF
unqualified-search-registries = []
[aliases]
"python" = "docker.io/library/python"
[[registry]]
location = "docker.io"
blocked = true
[[registry]]
location = "quay.io"
blocked = true
[[registry]]
location = "ghcr.io"
blocked = true
EOF
  # Without these ulimits `podman run` fails setting RLIMIT_NPROC ("error setting rlimit type 7").
  cat >"$PODMAN_DIR/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[network]
network_config_dir = "$PODMAN_DIR/cni"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$PODMAN_DIR/tmp/events.log"
runtime = "runc"
tmp_dir = "$PODMAN_DIR/tmp"
image_copy_tmp_dir = "$CACHE/tmp"
EOF
  export CONTAINERS_STORAGE_CONF=$PODMAN_DIR/storage.conf
  export CONTAINERS_REGISTRIES_CONF=$PODMAN_DIR/registries.conf
  export CONTAINERS_CONF=$PODMAN_DIR/containers.conf
  export TMPDIR=$CACHE/tmp
}

# Removes every tag of REPO but KEEP from podman's storage, then the images nothing names.
drop_other_tags() {
  local repo=$1 keep=$2 ref
  while IFS= read -r ref; do
    [ "$ref" = "$keep" ] || podman untag "$ref" "$ref" >/dev/null
  done < <(podman images --format '{{.Repository}}:{{.Tag}}' --filter "reference=$repo")
  podman image prune --force >/dev/null
}

# Runs a command, showing its output only when it fails.
quietly() {
  "$@" >"$work/log" 2>&1 || { cat "$work/log" >&2; say "failed: $1"; exit 1; }
}

# Builds with host networking (podman's default network leaves a bridge and iptables chains),
# without pulling, and with runc's state in the cache rather than in /run/runc.
build() {
  quietly podman build --network host --pull=never --runtime-flag "root=$PODMAN_DIR/run/runc" "$@"
}

# Saves REF as the oci-archive TAR, atomically, and removes the image's superseded tars.
save() {
  local name=$1 ref=$2 tar=$3 old
  rm -f "$tar.tmp"
  podman save --quiet --format oci-archive -o "$tar.tmp" "$ref"
  mv "$tar.tmp" "$tar"
  for old in "$CACHE/$name"-*.tar; do
    [ "$old" = "$tar" ] || rm -f "$old"
  done
  drop_other_tags "${ref%:*}" "$ref"
  local packed unpacked
  packed=$(stat -c %s "$tar" | numfmt --to=si --suffix=B)
  unpacked=$(podman image inspect --format '{{.Size}}' "$ref" | numfmt --to=si --suffix=B)
  say "$name: $ref, $packed tar, $unpacked unpacked"
}

build_pause() {
  local ctx=$1
  gcc -Os -static -s -Wall -Wextra -Werror -o "$ctx/pause" "$HERE/pause/pause.c"
  build -t "$2" "$ctx" -f "$HERE/pause/Containerfile"
}

build_runner() {
  local ctx=$1 bin base
  bin=$(act_runner_bin)
  "$bin" --version | grep -qx ".* $ACT_RUNNER_VERSION" ||
    die "$bin is not act_runner $ACT_RUNNER_VERSION: $("$bin" --version)"
  base=$(ensure_base runner RUNNER_BASE)
  cp "$bin" "$ctx/act_runner"
  cp "$HERE/runner/run.sh" "$HERE/runner/config.yaml" "$ctx/"
  build -t "$2" --build-arg BASE="$base" --build-arg VERSION="$ACT_RUNNER_VERSION" \
    -f "$HERE/runner/Containerfile" "$ctx"
}

build_scaler() {
  local ctx=$1 base ca=/etc/ssl/certs/ca-certificates.crt files mounts=()
  base=$(ensure_base python PYTHON_BASE)
  # Both FROM lines of the Dockerfile name python:3.11-slim, which resolves to this tag.
  podman tag "$base" docker.io/library/python:3.11-slim
  # The context holds exactly the hashed inputs, so the image is what its tag says.
  mapfile -t files < <(scaler_inputs)
  (cd "$ROOT" && cp --parents -- "${files[@]}" "$ctx/")
  # pip reaches PyPI through this machine's CA bundle, mounted for the build only: never in a layer.
  if [ -f "$ca" ]; then mounts=(-v "$ca:$ca:ro"); else say "no $ca: pip uses the image's CAs"; fi
  build -t "$2" "${mounts[@]}" "$ctx"
}

# The scaler image as the previous release built it: its files from git, the same base and build.
build_previous() {
  local ctx=$1 base ca=/etc/ssl/certs/ca-certificates.crt mounts=()
  git -C "$ROOT" cat-file -e "$PREVIOUS_RELEASE^{commit}" 2>/dev/null ||
    die "commit $PREVIOUS_RELEASE (tests/images/previous-release) is not in this clone: fetch its history"
  base=$(ensure_base python PYTHON_BASE)
  podman tag "$base" docker.io/library/python:3.11-slim
  git -C "$ROOT" archive "$PREVIOUS_RELEASE" -- Dockerfile pyproject.toml README.md deploy/image-install.sh \
    webhook_scaler reconciler | tar -x -C "$ctx"
  if [ -f "$ca" ]; then mounts=(-v "$ca:$ca:ro"); fi
  build -t "$2" "${mounts[@]}" "$ctx"
}

build_redis() {
  local base
  base=$(ensure_base redis REDIS_BASE)
  build -t "$2" --build-arg BASE="$base" --build-arg VERSION="$REDIS_VERSION" -f "$HERE/redis/Containerfile" "$1"
}

build_docker() {
  local base
  base=$(ensure_base docker DOCKER_BASE)
  cp "$HERE/docker/entrypoint.sh" "$1/"
  build -t "$2" --build-arg BASE="$base" -f "$HERE/docker/Containerfile" "$1"
}

build_upstream() {
  local name=$3 base binary
  base=$(ensure_base upstream UPSTREAM_BASE)
  binary=$(upstream_binary "$name")
  cp "$(upstream_bin "$name")" "$1/$binary"
  upstream_run_sh "$name" >"$1/run.sh"
  chmod +x "$1/run.sh"
  build -t "$2" --build-arg BASE="$base" --build-arg BINARY="$binary" \
    --build-arg VERSION="$(upstream_version "$name")" -f "$HERE/upstream/Containerfile" "$1"
}
build_upstream0() { build_upstream "$1" "$2" upstream0; }

build_rootless() {
  local base
  base=$(ensure_base rootless ROOTLESS_BASE)
  cp "$(upstream_bin upstream0)" "$1/act_runner"
  upstream_run_sh upstream0 >"$1/run.sh"
  chmod +x "$1/run.sh"
  upstream_s6 upstream0 "$1"
  cp "$HERE/rootless/dockerd-entrypoint.sh" "$HERE/rootless/daemon.json" "$1/"
  mkdir -p "$1/run/user" && chmod 1777 "$1/run/user"
  build -t "$2" --build-arg BASE="$base" --build-arg VERSION="$(upstream_version upstream0)" \
    -f "$HERE/rootless/Containerfile" "$1"
}
build_upstream1() { build_upstream "$1" "$2" upstream1; }

# --- Main ----------------------------------------------------------------------------------------
case ${1:-} in
  --print) [ $# -eq 2 ] || die "usage: $0 --print IMAGE"; tar_of "$2"; exit 0 ;;
  --wait)  # the same, once a build that holds the peers cache's lock (.ci/run's late lane) has ended
    [ $# -eq 2 ] || die "usage: $0 --wait IMAGE"
    tar=$(tar_of "$2")
    [ -f "$tar" ] || bash "$ROOT/tests/peers/build.sh" --await
    echo "$tar"
    exit 0 ;;
  --ref) [ $# -eq 2 ] || die "usage: $0 --ref IMAGE"; ref_of "$2"; exit 0 ;;
  -*) die "usage: $0 [--print IMAGE | --wait IMAGE | --ref IMAGE | IMAGE...]" ;;
esac

images=("$@")
[ ${#images[@]} -gt 0 ] || images=("${IMAGES[@]}")
work=
trap 'rm -rf "$work"' EXIT
for image in "${images[@]}"; do
  # The default act_runner comes from tests/peers/build.sh, which builds it if need be.
  if [ "$image" = runner ] && [ -z "${GRS_ACT_RUNNER_BIN:-}" ] && [ ! -f "$(act_runner_bin)" ]; then
    bash "$ROOT/tests/peers/build.sh" act_runner >&2
  fi
  case $image in
    upstream0|upstream1) [ -f "$(upstream_bin "$image")" ] || bash "$ROOT/tests/peers/build.sh" "$(upstream_peer "$image")" >&2 ;;
    rootless) [ -f "$(upstream_bin upstream0)" ] || bash "$ROOT/tests/peers/build.sh" act_runner0 >&2 ;;
  esac
  tar=$(tar_of "$image")
  [ ! -f "$tar" ] || continue
  if [ -z "$work" ]; then
    # Builds run in a private mount namespace (see setup_podman): every mount they make
    # (mmdebstrap's /proc and /dev, podman's layers) ends with it.
    if [ -z "${GRS_IMAGES_PRIVATE:-}" ]; then
      exec unshare --mount --propagation private -- env GRS_IMAGES_PRIVATE=1 bash "$0" "${images[@]}"
    fi
    # One build at a time per cache; a concurrent call may have built the image meanwhile.
    exec 9>"$CACHE/.lock"
    flock 9
    setup_podman
    work=$(mktemp -d "$CACHE/tmp/build.XXXXXX")
  fi
  [ ! -f "$tar" ] || continue
  ref=$(ref_of "$image")
  say "building $image ($ref)"
  start=$SECONDS
  mkdir "$work/$image"
  "build_$image" "$work/$image" "$ref"
  save "$image" "$ref" "$tar"
  say "$image built in $((SECONDS - start)) s"
done
printf '%s\n' "$CACHE"
