#!/usr/bin/env bash
# The newcomer's demo: installs and builds what it needs (once; cached afterwards), starts the
# sandbox (a real one-node cluster, Gitea, Redis, webhook-scaler and reconciler), pushes a workflow
# and shows it running on act_runner Pods until Gitea reports it green. Stop it with Ctrl-C: every
# change to this machine is undone. Needs root (the node changes the host).
set -euo pipefail
cd "$(dirname "$0")/../.."
echo "[demo] installing and building what is missing (about 45 minutes the first time, then seconds)"
bash tests/setup.sh >/dev/null
exec .venv/bin/python -m tests.e2e.demo
