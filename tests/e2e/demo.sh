#!/usr/bin/env bash
# The newcomer's demo: builds what it needs (once; progress is shown), starts a sandbox with a real
# Gitea, Redis and Kubernetes API and our two processes, pushes a workflow, and shows what happens.
# Stop it with Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v redis-server >/dev/null; then
  echo "[demo] installing redis-server (Debian package)"
  if [ "$(id -u)" -eq 0 ]; then apt-get update -qq && apt-get install -y -qq redis-server >/dev/null
  else sudo apt-get update -qq && sudo apt-get install -y -qq redis-server >/dev/null; fi
fi
echo "[demo] building the peers from their Go modules (about 20 minutes the first time, then cached)"
bash tests/peers/build.sh etcd kube gitea >/dev/null
if [ ! -x .venv/bin/webhook-scaler ]; then
  echo "[demo] installing the project into .venv"
  python3 -m venv .venv
  .venv/bin/pip install -q -e '.[test]'
fi
exec .venv/bin/python -m tests.e2e.demo
