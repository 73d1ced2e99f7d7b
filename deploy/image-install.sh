#!/bin/sh
# Installs gitea-runner-scaler from a source tree into a fresh virtualenv: the Dockerfile's install
# step, and the one the tests run to check the image's entry points without a Docker engine.
#   deploy/image-install.sh VENV SRC [REVISION]
# REVISION (the commit built from) goes in VENV/REVISION, where `--version` reads it.
set -eu
venv=$1
src=$2
revision=${3:-}
python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check --quiet "$src"
test -x "$venv/bin/webhook-scaler"
test -x "$venv/bin/reconciler"
if [ -n "$revision" ]; then printf '%s\n' "$revision" >"$venv/REVISION"; fi
