#!/bin/sh
# What docker:dind's entrypoint does before it starts the daemon, for a privileged container:
# AppArmor and friends need securityfs, and dockerd wants a writable /tmp of its own.
set -eu
if [ -d /sys/kernel/security ] && ! mountpoint -q /sys/kernel/security; then
  mount -t securityfs none /sys/kernel/security || echo "dind: could not mount securityfs" >&2
fi
if ! mountpoint -q /tmp; then
  mount -t tmpfs none /tmp || echo "dind: could not mount a tmpfs on /tmp" >&2
fi
exec "$@"
