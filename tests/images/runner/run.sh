#!/usr/bin/env bash
# Entrypoint of the act_runner stand-in image (tests/images/build.sh runner): the documented
# behaviour of the upstream image's scripts/run.sh, without two of its bugs.
#
#   GITEA_INSTANCE_URL                   Gitea's URL (needed to register)
#   GITEA_RUNNER_REGISTRATION_TOKEN      the registration token, or
#   GITEA_RUNNER_REGISTRATION_TOKEN_FILE a file holding it (used when the variable is empty)
#   GITEA_RUNNER_NAME                    default: the hostname
#   GITEA_RUNNER_LABELS                  comma separated; ignored by act_runner when the config has labels
#   GITEA_RUNNER_EPHEMERAL               non-empty: register with --ephemeral (one job, then exit)
#   GITEA_RUNNER_ONCE                    non-empty: `daemon --once`
#   CONFIG_FILE                          passed as --config to both commands
#   GITEA_MAX_REG_ATTEMPTS               default 10, 5 s apart
#   GITEA_REG_ATTEMPT_TIMEOUT            seconds one attempt may take, default 30 (ours: act_runner
#                                        retries an unreachable Gitea every second, forever)
#   RUNNER_STATE_FILE                    default .runner, in /data
#
# Registers unless the state file is non-empty, forgets the token, then execs `act_runner daemon`.
# A command given to the container (`podman run IMAGE act_runner --version`) runs instead.
# Unlike upstream: a token Gitea refuses ends the script at once instead of being retried, running
# out of attempts exits 1 instead of starting a daemon that has no registration, and each attempt
# is bounded in time so that the attempts can run out at all.
set -euo pipefail

say() { printf 'run.sh: %s\n' "$*" >&2; }

[ $# -eq 0 ] || exec "$@"

mkdir -p /data
cd /data

state=${RUNNER_STATE_FILE:-.runner}
config=()
[ -z "${CONFIG_FILE:-}" ] || config=(--config "$CONFIG_FILE")
daemon_args=()
[ -z "${GITEA_RUNNER_ONCE:-}" ] || daemon_args=(--once)

if [ ! -s "$state" ]; then
  token=${GITEA_RUNNER_REGISTRATION_TOKEN:-}
  if [ -z "$token" ] && [ -n "${GITEA_RUNNER_REGISTRATION_TOKEN_FILE:-}" ]; then
    [ -f "$GITEA_RUNNER_REGISTRATION_TOKEN_FILE" ] || {
      say "GITEA_RUNNER_REGISTRATION_TOKEN_FILE=$GITEA_RUNNER_REGISTRATION_TOKEN_FILE is not a file"
      exit 1
    }
    token=$(<"$GITEA_RUNNER_REGISTRATION_TOKEN_FILE")
  fi
  [ -n "${GITEA_INSTANCE_URL:-}" ] || { say "GITEA_INSTANCE_URL is not set and $state is missing or empty"; exit 1; }
  [ -n "$token" ] || { say "no registration token (GITEA_RUNNER_REGISTRATION_TOKEN or _FILE) and $state is missing or empty"; exit 1; }

  attempts=${GITEA_MAX_REG_ATTEMPTS:-10}
  timeout=${GITEA_REG_ATTEMPT_TIMEOUT:-30}
  [[ $attempts =~ ^[1-9][0-9]*$ ]] || { say "GITEA_MAX_REG_ATTEMPTS must be a positive integer, not '$attempts'"; exit 1; }
  [[ $timeout =~ ^[1-9][0-9]*$ ]] || { say "GITEA_REG_ATTEMPT_TIMEOUT must be a positive integer, not '$timeout'"; exit 1; }

  args=(register --no-interactive --instance "$GITEA_INSTANCE_URL" --token "$token"
        --name "${GITEA_RUNNER_NAME:-$HOSTNAME}" "${config[@]}")
  [ -z "${GITEA_RUNNER_LABELS:-}" ] || args+=(--labels "$GITEA_RUNNER_LABELS")
  [ -z "${GITEA_RUNNER_EPHEMERAL:-}" ] || args+=(--ephemeral)

  log=$(mktemp)
  registered=
  for ((try = 1; try <= attempts; try++)); do
    say "registering with $GITEA_INSTANCE_URL (attempt $try of $attempts)"
    # act_runner prints neither the token nor its flags; its output goes to our log as it comes.
    rc=0
    timeout -k 5 "$timeout" act_runner "${args[@]}" 2>&1 | tee "$log" || rc=$?
    if [ "$rc" -eq 0 ] && grep -q 'Runner registered successfully' "$log"; then
      registered=1
      break
    fi
    # register.go logs "poller: cannot register new runner" when Gitea answered the Register call
    # with an error; Gitea's errors for a bad token name the token ("runner registration token not
    # found", "... has been invalidated ...") with code invalid_argument. Retrying cannot help.
    if grep -qiE 'poller: cannot register new runner.*(token|invalid_argument|unauthenticated|permission_denied)' "$log"; then
      rm -f "$log"
      say "Gitea refused the registration token: not retrying"
      exit 1
    fi
    [ "$rc" -ne 124 ] || say "no registration within ${timeout}s"
    [ "$try" -eq "$attempts" ] || { say "waiting to retry ..."; sleep 5; }
  done
  rm -f "$log"
  [ -n "$registered" ] || { say "could not register in $attempts attempts"; exit 1; }
  say "registered"
fi

# The daemon and the jobs it runs on the host inherit this environment: drop the token from it.
unset token GITEA_RUNNER_REGISTRATION_TOKEN GITEA_RUNNER_REGISTRATION_TOKEN_FILE
exec act_runner daemon "${config[@]}" "${daemon_args[@]}"
