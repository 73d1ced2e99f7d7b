#!/usr/bin/env bash
# The sandbox: the whole product on a real one-node cluster, for trying it by hand or from a script.
#
#   tests/e2e/sandbox.sh up DIR     build what is missing (once), start everything, write DIR/sandbox.json
#   tests/e2e/sandbox.sh down DIR   stop everything and undo every change to this machine
#
# DIR/sandbox.json has gitea_url, gitea_token (an admin API token), owner, repo, kubeconfig,
# namespace, runner_labels, redis_url, webhook_url and more; push a workflow with `runs-on:
# ubuntu-latest` to the repo and watch it run. Needs root (the node changes the host).
set -euo pipefail
cd "$(dirname "$0")/../.."
usage() { echo "usage: $0 up|down DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
dir=$2

case $1 in
  up)
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    if [ -f "$dir/sandbox.pid" ] && kill -0 "$(cat "$dir/sandbox.pid")" 2>/dev/null; then
      echo "a sandbox already runs in $dir (pid $(cat "$dir/sandbox.pid")); '$0 down $dir' first" >&2
      exit 1
    fi
    bash tests/setup.sh >&2
    rm -f "$dir/sandbox.json"
    setsid .venv/bin/python -m tests.e2e.sandbox serve "$dir" >"$dir/sandbox.log" 2>&1 < /dev/null &
    pid=$!
    for _ in $(seq 1 1800); do
      if [ -f "$dir/sandbox.json" ]; then
        cat "$dir/sandbox.json"
        exit 0
      fi
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "the sandbox failed to start; its log:" >&2
        tail -n 40 "$dir/sandbox.log" >&2
        exit 1
      fi
      sleep 0.1
    done
    echo "the sandbox did not come up within 3 minutes; see $dir/sandbox.log" >&2
    kill -TERM "$pid"
    exit 1
    ;;
  down)
    [ -f "$dir/sandbox.pid" ] || { echo "no sandbox in $dir" >&2; exit 1; }
    pid=$(cat "$dir/sandbox.pid")
    if kill -TERM "$pid" 2>/dev/null; then
      while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f "$dir/sandbox.pid"
    tail -n 1 "$dir/sandbox.log"
    grep -q 'left on the host: nothing' "$dir/sandbox.log"
    ;;
  *) usage ;;
esac
