#!/usr/bin/env bash
# Repair figures (decision 0021): three local daemons with two copies; 512 MiB written,
# daemon 1 killed (kill -9), 256 MiB more written while it is down; daemon 1 started again
# on its root and address (it rejoins) and `eddy repair` timed; then daemon 1 killed again,
# its root wiped, `eddy replace 1` + `eddy repair` timed (a full resync); two files read back.
# Usage: scripts/repair-figures.sh [RELEASE_DIR] (default target/release).
set -euo pipefail

B=$(realpath "${1:-target/release}")
export EDDY_DAEMON_BIN=$B/eddyd
D=$(mktemp -d /tmp/eddy-repair-figures.XXXXXX)
secs() { echo "$2 - $1" | bc; }
"$B/eddy" start --local 3 --root "$D/root" --replicas 2 >/dev/null
trap '"$B/eddy" stop --state "$D/root" >/dev/null 2>&1 || true; rm -rf "$D"' EXIT
head -c 64M /dev/urandom > "$D/blob"
put() { EDDY_LOG=error "$B/eddy" debug put --state "$D/root" "$D/blob" "/f$1" >/dev/null; }
for i in 1 2 3 4 5 6 7 8; do put "$i"; done
pid=$(awk '$1=="daemon-1"{print $2}' "$D/root/pids")
addr=$(grep -A3 'id = 1' "$D/root/deployment.toml" | awk -F'"' '/addr/{print $2}')
mapfile -d '' cmd < "/proc/$pid/cmdline"
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
s=$(date +%s.%N); for i in 9 10 11 12; do put "$i"; done; e=$(date +%s.%N)
echo "256 MiB written with daemon 1 down: $(secs "$s" "$e") s"
"$B/eddy" status --state "$D/root" --json | grep '"under_replicated"' || true
# Daemon 1 again, on its root and its address: it rejoins.
args=("${cmd[@]:1}")
for j in "${!args[@]}"; do [ "${args[$j]}" = "127.0.0.1:0" ] && args[$j]=$addr; done
rm -f "$D/root/d1/eddyd.ready"
setsid "$B/eddyd" "${args[@]}" > "$D/restart.log" 2>&1 < /dev/null &
while [ ! -e "$D/root/d1/eddyd.ready" ]; do sleep 0.05; done
s=$(date +%s.%N); "$B/eddy" repair --state "$D/root"; e=$(date +%s.%N)
echo "restarted daemon 1, eddy repair: $(secs "$s" "$e") s"
pid=$(grep -o '"pid": *[0-9]*' "$D/root/d1/eddyd.ready" | grep -o '[0-9]*$')
kill -9 "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
rm -rf "$D/root/d1"
s=$(date +%s.%N)
"$B/eddy" replace 1 --state "$D/root" >/dev/null
"$B/eddy" repair --state "$D/root"
e=$(date +%s.%N)
echo "wiped daemon 1, eddy replace + eddy repair (full resync): $(secs "$s" "$e") s"
"$B/eddy" status --state "$D/root" --json | grep -E '"health"|"chunk_bytes"'
for i in 1 12; do
  EDDY_LOG=error "$B/eddy" debug get --state "$D/root" "/f$i" "$D/back" >/dev/null
  cmp "$D/blob" "$D/back" && echo "/f$i reads back"
done
