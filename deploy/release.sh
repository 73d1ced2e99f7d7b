#!/usr/bin/env bash
# Publishes a release at pyproject.toml's version, the one version source: Chart.yaml's `version` and
# `appVersion` and the Dockerfile's VERSION must say the same, or nothing is pushed.
#
#   deploy/release.sh --registry REGISTRY [--plain-http] [--platform PLATFORM]
#                                              your own copy, from a clone: build the image for one
#                                              platform (default: this machine's) and push it, copy the
#                                              other images the chart pulls, push the chart, then print
#                                              the `helm install` line that installs from REGISTRY
#   deploy/release.sh images [REGISTRY]        the images the chart pulls (every feature on), as
#                                              `--registry REGISTRY` puts them there (default: their
#                                              own registries)
#   deploy/release.sh version                  print the version (after checking the others agree)
#   deploy/release.sh check-tag TAG            refuse a git tag that is not v<version>
#   deploy/release.sh image REGISTRY [ARG...]  build the image for linux/amd64 and linux/arm64 with
#                                              `docker buildx` and push REGISTRY/<repository>:<version>
#   deploy/release.sh chart REGISTRY [ARG...]  package the chart and `helm push` it to
#                                              oci://REGISTRY/<owner>/charts
#
# REGISTRY is a host[:port], as `global.imageRegistry` takes it; <repository> is the chart's default
# `image.repository` (bpg-pw/gitea-runner-scaler). `global.imageRegistry=REGISTRY` moves every image
# of the chart to REGISTRY (same repository and tag), so an install from a registry `--registry` filled
# needs only that value; `image` and `chart` (the tag's release workflow) publish the chart's own image
# and the chart, whose other images stay on Docker Hub. ARGs go to buildx or `helm push` (e.g.
# --plain-http). --plain-http: the registry speaks HTTP (Docker must list it in its daemon's
# insecure-registries unless it is on localhost; podman is told --tls-verify=false).
# HELM and DOCKER name the binaries (default: helm, docker; DOCKER=podman works for --registry);
# DIST is where the package goes (dist/).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CHART=$ROOT/deploy/helm/gitea-runner-scaler
HELM=${HELM:-helm}
DOCKER=${DOCKER:-docker}
DIST=${DIST:-$ROOT/dist}

die() { echo "release: $*" >&2; exit 1; }

version() {
  local project chart app docker
  project=$(python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
    "$ROOT/pyproject.toml")
  chart=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART/Chart.yaml")
  app=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$CHART/Chart.yaml")
  docker=$(sed -n 's/^ARG VERSION=\(.*\)$/\1/p' "$ROOT/Dockerfile")
  [ "$chart" = "$project" ] && [ "$app" = "$project" ] && [ "$docker" = "$project" ] ||
    die "versions disagree: pyproject.toml $project, Chart.yaml version $chart appVersion $app, Dockerfile $docker"
  echo "$project"
}

# The chart's default image repository (values.yaml's first `repository:`, under `image:`).
repository() { sed -n 's/^  repository: *//p' "$CHART/values.yaml" | head -n1; }

# Every image the chart's Pods pull with every feature that brings one on, as the chart renders them
# by default (registry/repository:tag), one a line.
chart_images() {
  "$HELM" template grs "$CHART" --kube-version 1.30.0 --set cache.enabled=true --set redis.enabled=true |
    sed -n 's/^ *image: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' | sort -u
}

# An image reference moved to another registry: its first part (the registry host) replaced.
moved() { echo "$2/${1#*/}"; }

push_image() {
  if [ "$plain" ] && [ "$(basename "$DOCKER")" = podman ]; then
    "$DOCKER" push --tls-verify=false "$1"
  else
    "$DOCKER" push "$1"
  fi
}

# Your own copy: the image built here for one platform, the chart's other images copied under their
# repository and tag, the chart pushed; then the install line.
own_copy() {
  local registry="" platform="" v own ref
  plain=""
  while [ $# -gt 0 ]; do
    case $1 in
      --registry) [ $# -ge 2 ] || die "--registry needs a host[:port]"; registry=$2; shift 2 ;;
      --plain-http) plain=1; shift ;;
      --platform) [ $# -ge 2 ] || die "--platform needs a value (e.g. linux/amd64)"; platform=$2; shift 2 ;;
      *) die "unknown argument $1: usage: $0 --registry REGISTRY [--plain-http] [--platform PLATFORM]" ;;
    esac
  done
  [ "$registry" ] || die "usage: $0 --registry REGISTRY [--plain-http] [--platform PLATFORM]"
  case $registry in */*|*://*) die "--registry takes a host[:port] (e.g. registry.example.com:5000), not $registry" ;; esac
  v=$(version)
  own="$registry/$(repository):$v"
  "$DOCKER" build ${platform:+--platform "$platform"} --build-arg VERSION="$v" \
    --build-arg REVISION="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || true)" -t "$own" "$ROOT"
  push_image "$own"
  for ref in $(chart_images); do
    [ "$(moved "$ref" "$registry")" = "$own" ] && continue
    "$DOCKER" pull ${platform:+--platform "$platform"} "$ref"
    "$DOCKER" tag "$ref" "$(moved "$ref" "$registry")"
    push_image "$(moved "$ref" "$registry")"
  done
  chart "$registry" ${plain:+--plain-http}
  owner=$(repository); owner=${owner%%/*}
  echo
  echo "Pushed to $registry: $(chart_images | while read -r ref; do printf '%s ' "$(moved "$ref" "$registry")"; done)and the chart."
  echo "Install it (step 3 of the README's quick start):"
  echo "  helm install runners oci://$registry/$owner/charts/gitea-runner-scaler --version $v${plain:+ --plain-http} -n ci \\"
  echo "    --set global.imageRegistry=$registry --set gitea.url=\"\$GITEA_URL\""
}

chart() {
  local registry=$1 v owner; shift
  v=$(version)
  owner=$(repository); owner=${owner%%/*}
  mkdir -p "$DIST"
  "$HELM" package "$CHART" --destination "$DIST" >/dev/null
  "$HELM" push "$DIST/gitea-runner-scaler-$v.tgz" "oci://$registry/$owner/charts" "$@"
}

case ${1:-} in
  version) version ;;
  check-tag)
    [ $# -eq 2 ] || die "usage: $0 check-tag TAG"
    v=$(version)
    [ "$2" = "v$v" ] || die "tag $2 is not v$v (pyproject.toml's version): bump the version first"
    ;;
  image)
    [ $# -ge 2 ] || die "usage: $0 image REGISTRY [buildx argument...]"
    registry=$2; shift 2
    v=$(version)
    revision=$(git -C "$ROOT" rev-parse HEAD)
    "$DOCKER" buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION="$v" \
      --build-arg REVISION="$revision" -t "$registry/$(repository):$v" --push "$@" "$ROOT"
    ;;
  chart)
    [ $# -ge 2 ] || die "usage: $0 chart REGISTRY [helm push argument...]"
    shift; chart "$@"
    ;;
  --registry) own_copy "$@" ;;
  images)
    [ $# -le 2 ] || die "usage: $0 images [REGISTRY]"
    for ref in $(chart_images); do if [ $# -eq 2 ]; then moved "$ref" "$2"; else echo "$ref"; fi; done
    ;;
  *) die "usage: $0 --registry REGISTRY [--plain-http] [--platform PLATFORM] | images [REGISTRY] | version | check-tag TAG | image REGISTRY [ARG...] | chart REGISTRY [ARG...]" ;;
esac
