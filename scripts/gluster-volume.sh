#!/usr/bin/env bash
# A GlusterFS volume on this host, for trying Eddy in front of a real network file system:
#   scripts/gluster-volume.sh up DIR [BRICKS [READ_DELAY_US]]
#                                               creates volume "eddy-<basename DIR>" with BRICKS
#                                               (default 2) bricks under DIR and mounts it at
#                                               DIR/mnt with the GlusterFS FUSE client; with
#                                               READ_DELAY_US, every read a brick serves waits
#                                               that long first (GlusterFS's own debug/delay-gen
#                                               translator): a backend with a network's latency
#   scripts/gluster-volume.sh down DIR          unmounts, stops and deletes it, removes DIR
# Bricks are named by the host name eddy-gluster-host (GlusterFS refuses localhost and 127.x;
# scripts/install-deps.sh adds it to /etc/hosts). Needs root and glusterfs-server/-client.
# A glusterd this script starts (its pid in $PIDFILE) is stopped by the `down` that removes
# the last volume; a glusterd of the machine's own is used and left running.
set -euo pipefail

HOST=eddy-gluster-host
PIDFILE=/run/eddy-gluster-volume.pid
cmd=${1:-}
dir=${2:-}
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 up|down DIR [BRICKS]" >&2; exit 2; }
dir=$(realpath -m "$dir")
name="eddy-$(basename "$dir" | tr -c 'A-Za-z0-9_\n-' '-')"

ensure_glusterd() {
  if ! pgrep -x glusterd >/dev/null; then
    glusterd -p "$PIDFILE" --log-level WARNING
  fi
  for _ in $(seq 100); do
    gluster --mode=script volume list >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "glusterd does not answer (see /var/log/glusterfs/glusterd.log)" >&2
  exit 1
}

case "$cmd" in
up)
  bricks=${3:-2}
  getent hosts "$HOST" >/dev/null || { echo "$HOST does not resolve: run scripts/install-deps.sh" >&2; exit 1; }
  ensure_glusterd
  mkdir -p "$dir/mnt"
  spec=()
  for i in $(seq 0 $((bricks - 1))); do
    mkdir -p "$dir/brick$i"
    spec+=("$HOST:$dir/brick$i")
  done
  # force: bricks on the root file system and several bricks on one server are refused otherwise.
  gluster --mode=script volume create "$name" "${spec[@]}" force >/dev/null
  delay=${4:-0}
  if [ "$delay" -gt 0 ]; then
    # The translator sits above each brick's storage; READ is the read fop's name.
    gluster --mode=script volume set "$name" debug.delay-gen posix >/dev/null
    gluster --mode=script volume set "$name" delay-gen.enable READ >/dev/null
    gluster --mode=script volume set "$name" delay-gen.delay-percentage 100 >/dev/null
    gluster --mode=script volume set "$name" delay-gen.delay-duration "$delay" >/dev/null
  fi
  gluster --mode=script volume start "$name" >/dev/null
  for _ in $(seq 100); do
    mount -t glusterfs "$HOST:/$name" "$dir/mnt" 2>/dev/null && break
    sleep 0.2
  done
  mountpoint -q "$dir/mnt" || { echo "cannot mount volume $name at $dir/mnt" >&2; exit 1; }
  echo "$dir/mnt"
  ;;
down)
  if mountpoint -q "$dir/mnt" 2>/dev/null; then umount "$dir/mnt" || umount -l "$dir/mnt"; fi
  if pgrep -x glusterd >/dev/null && gluster --mode=script volume info "$name" >/dev/null 2>&1; then
    gluster --mode=script volume stop "$name" force >/dev/null || true
    gluster --mode=script volume delete "$name" >/dev/null
  fi
  rm -rf "$dir"
  # The glusterd this script started goes with the last volume.
  if [ -s "$PIDFILE" ] && [ "$(cat /proc/"$(cat "$PIDFILE")"/comm 2>/dev/null)" = glusterd ] &&
     [ -z "$(gluster --mode=script volume list 2>/dev/null | grep -v '^No volumes present')" ]; then
    kill "$(cat "$PIDFILE")" && rm -f "$PIDFILE"
  fi
  ;;
*)
  echo "usage: $0 up|down DIR [BRICKS]" >&2
  exit 2
  ;;
esac
