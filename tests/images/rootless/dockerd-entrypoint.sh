#!/bin/sh
# A stand-in for docker:dind-rootless's /usr/local/bin/dockerd-entrypoint.sh, for Debian bookworm:
# as root it behaves like docker:dind (securityfs, /tmp tmpfs, then dockerd); as any other user it
# runs dockerd under rootlesskit through Debian's dockerd-rootless.sh (slirp4netns: Debian has no
# vpnkit), like upstream's rootless branch. No TLS/TCP listener: act_runner talks to unix://$XDG_RUNTIME_DIR/docker.sock.
set -eu

# no arguments, or the first one is an option: dockerd with the default socket
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ]; then
  uid=$(id -u)
  if [ "$uid" = 0 ]; then
    sock=unix:///var/run/docker.sock
  else
    : "${XDG_RUNTIME_DIR:=/run/user/$uid}"
    sock=unix://$XDG_RUNTIME_DIR/docker.sock
  fi
  case ${DOCKER_HOST:-} in unix://*) sock=$DOCKER_HOST ;; esac
  set -- dockerd --host="$sock" "$@"
fi

if [ "$1" != dockerd ]; then
  exec "$@"
fi

# a stale PID file (unclean stop) keeps dockerd from starting
find /run /var/run -iname 'docker*.pid' -delete 2>/dev/null || :

uid=$(id -u)
if [ "$uid" = 0 ]; then
  if [ -d /sys/kernel/security ] && ! mountpoint -q /sys/kernel/security; then
    mount -t securityfs none /sys/kernel/security || echo "dind: could not mount securityfs" >&2
  fi
  if ! mountpoint -q /tmp; then
    mount -t tmpfs none /tmp || echo "dind: could not mount a tmpfs on /tmp" >&2
  fi
  exec docker-init -- "$@"
fi

user=$(id -un 2>/dev/null || :)
if ! grep -qE "^($uid${user:+|$user}):" /etc/subuid || ! grep -qE "^($uid${user:+|$user}):" /etc/subgid; then
  echo "error: rootless dockerd needs entries for $uid in /etc/subuid and /etc/subgid" >&2
  exit 1
fi
: "${XDG_RUNTIME_DIR:=/run/user/$uid}"
export XDG_RUNTIME_DIR
: "${HOME:=/home/$user}"
if ! mkdir -p "$XDG_RUNTIME_DIR" || [ ! -w "$XDG_RUNTIME_DIR" ] ||
   ! mkdir -p "$HOME/.local/share/docker" || [ ! -w "$HOME/.local/share/docker" ]; then
  echo "error: rootless dockerd needs a writable HOME ($HOME) and XDG_RUNTIME_DIR ($XDG_RUNTIME_DIR)" >&2
  exit 1
fi
chmod 700 "$XDG_RUNTIME_DIR" 2>/dev/null || :
if [ -f /proc/sys/user/max_user_namespaces ] && [ "$(cat /proc/sys/user/max_user_namespaces)" = 0 ]; then
  echo "error: rootless dockerd needs user.max_user_namespaces > 0" >&2
  exit 1
fi

# rootlesskit's slirp4netns network opens /dev/net/tun as this user (from inside its user namespace):
# a privileged container gets the host's node and mode, 0600 root where no udev rule made it 0666.
if ! [ -r /dev/net/tun ] || ! [ -w /dev/net/tun ]; then
  echo "error: rootless dockerd needs /dev/net/tun readable and writable by uid $uid ($(ls -l /dev/net/tun 2>&1)):" \
       "make it 0666 on the node, as udev does" >&2
  exit 1
fi

# Storage: keep what the user chose (daemon.json or --storage-driver). Otherwise dockerd's default
# (overlay2, in the user namespace) works when the data root is on a real filesystem (an emptyDir);
# on the container's own overlayfs root overlay2 fails ("driver not supported"): use fuse-overlayfs
# if /dev/fuse is usable by this user (0666, as udev makes it), else vfs.
case " $* " in *" --storage-driver"*|*" -s "*) ;; *)
  if ! grep -qs '"storage-driver"' "${XDG_CONFIG_HOME:-$HOME/.config}/docker/daemon.json"; then
    if [ "$(stat -f -c %T "$HOME/.local/share/docker")" = overlayfs ]; then
      if [ -r /dev/fuse ] && [ -w /dev/fuse ]; then
        set -- "$@" --storage-driver=fuse-overlayfs
      else
        set -- "$@" --storage-driver=vfs
      fi
    fi
  fi ;;
esac

# Debian's dockerd-rootless.sh (docker.io contrib): rootlesskit --net=slirp4netns --mtu=65520
# --copy-up=/etc --copy-up=/run --disable-host-loopback --port-driver=builtin, then dockerd in the
# child namespaces. docker-init (tini) reaps the shims, as upstream's entrypoint does.
shift  # dockerd
exec docker-init -s -- dockerd-rootless.sh "$@"
