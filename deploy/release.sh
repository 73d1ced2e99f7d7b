#!/usr/bin/env bash
# Publishes a release at pyproject.toml's version, the one version source: Chart.yaml's `version` and
# `appVersion` and the Dockerfile's VERSION must say the same, or nothing is pushed.
#
#   deploy/release.sh version                  print the version (after checking the others agree)
#   deploy/release.sh check-tag TAG            refuse a git tag that is not v<version>
#   deploy/release.sh image REGISTRY [ARG...]  build the image for linux/amd64 and linux/arm64 with
#                                              `docker buildx` and push REGISTRY/<repository>:<version>
#   deploy/release.sh chart REGISTRY [ARG...]  package the chart and `helm push` it to
#                                              oci://REGISTRY/<owner>/charts
#
# REGISTRY is a host[:port], as `global.imageRegistry` takes it; <repository> is the chart's default
# `image.repository` (bpg-pw/gitea-runner-scaler), so an install from REGISTRY needs only
# `--set global.imageRegistry=REGISTRY`. ARGs go to buildx or `helm push` (e.g. --plain-http).
# HELM and DOCKER name the binaries (default: helm, docker); DIST is where the package goes (dist/).
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
    registry=$2; shift 2
    v=$(version)
    owner=$(repository); owner=${owner%%/*}
    mkdir -p "$DIST"
    "$HELM" package "$CHART" --destination "$DIST" >/dev/null
    "$HELM" push "$DIST/gitea-runner-scaler-$v.tgz" "oci://$registry/$owner/charts" "$@"
    ;;
  *) die "usage: $0 version | check-tag TAG | image REGISTRY [ARG...] | chart REGISTRY [ARG...]" ;;
esac
