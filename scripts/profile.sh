#!/bin/bash
# Flame graphs of where the time of a create and of a 1 MiB write goes, the whole machine
# sampled (the benchmark's processes, the three daemons, the kernel): Debian's linux-perf
# records, inferno draws. Output: docs/guide/figures/profile-create.svg, docs/guide/figures/profile-write-1m.svg.
#
#   bash scripts/profile.sh target/release [library|mount]
#
# Installs linux-perf and inferno if they are missing. Needs root (system-wide sampling).
set -euo pipefail
# shellcheck source=lib/profile-summary.sh
. "$(dirname "$0")/lib/profile-summary.sh"

BIN=${1:?usage: profile.sh RELEASE_DIR [library|mount]}
VIA=${2:-library}
BIN=$(cd "$BIN" && pwd)
OUT=$(pwd)/docs/guide/figures
FREQ=${PROFILE_FREQ:-499}

command -v perf >/dev/null || apt-get install -y linux-perf
command -v inferno-flamegraph >/dev/null || cargo install --locked inferno
export PATH=$HOME/.cargo/bin:$PATH

WORK=$(mktemp -d /dev/shm/eddy-profile.XXXXXX)
MNT=$WORK/mnt
cleanup() {
  set +e
  mountpoint -q "$MNT" && "$BIN/eddy" umount "$MNT" >/dev/null
  "$BIN/eddy" stop --state "$WORK/state" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$MNT"
"$BIN/eddy" start --local 3 --root "$WORK/roots" --state "$WORK/state" --mount "$MNT" >/dev/null
if [ "$VIA" = mount ]; then TARGET=$MNT; else TARGET=eddy:$WORK/state; fi

# profile NAME TITLE WORKLOAD ARGS...: samples the whole machine while the workload runs.
profile() {
  local name=$1 title=$2
  shift 2
  perf record -F "$FREQ" -a -g --call-graph dwarf,16384 -o "$WORK/$name.data" -- \
    "$BIN/eddy" bench run "$TARGET" --procs 2 "$@" >"$WORK/$name.bench" 2>&1
  # --no-inline: inline frames would be resolved by addr2line, slowly.
  perf script --no-inline -i "$WORK/$name.data" 2>/dev/null | inferno-collapse-perf >"$WORK/$name.folded"
  inferno-flamegraph --title "$title ($VIA, 2 procs, 3 daemons on tmpfs)" \
    <"$WORK/$name.folded" >"$OUT/$name.svg"
  echo "== $name: $OUT/$name.svg"
  grep -E 'ior|mdtest' "$WORK/$name.bench" | head -5
  summarize "$WORK/$name.folded" 20
}

profile profile-create "Eddy: creates (mdtest-easy)" --workloads mdtest-easy --scale 0.5
profile profile-write-1m "Eddy: 1 MiB writes (ior-easy)" --workloads ior-easy --easy-xfer 1048576 --scale 0.5
