#!/bin/bash
# Flame graphs of ior-easy's write through the client library (eddy-lib) and through the
# mount (eddy), in the netns host layout with placement local (issue 23; decision 0047):
# `eddy bench suite --hosts 3 --placement local --workloads ior-easy` runs, and for each of
# the two runs the whole machine is sampled (the ranks, the three daemons, the mounts, the
# kernel) from the moment the suite announces the run until its ior-easy-write phase has
# ended (the run's setup, a few ms of it, included; its read phase not), other builds on the
# machine filtered out. Debian's linux-perf
# records, inferno draws. Output: docs/guide/figures/profile-ior-easy-{lib,mount}-TAG.svg.
#
#   bash scripts/profile-ior-easy.sh target/release [TAG]     (TAG: before (default), after)
#
# Installs linux-perf and inferno if they are missing. Needs root (namespaces, system-wide
# sampling).
set -euo pipefail
# shellcheck source=lib/profile-summary.sh
. "$(dirname "$0")/lib/profile-summary.sh"

BIN=${1:?usage: profile-ior-easy.sh RELEASE_DIR [TAG]}
TAG=${2:-before}
BIN=$(cd "$BIN" && pwd)
OUT=$(pwd)/docs/guide/figures
FREQ=${PROFILE_FREQ:-499}
SCALE=${PROFILE_SCALE:-1}
# Processes (first frame) that are not Eddy's nor the benchmark's: other builds on the machine.
OTHERS='^(rustc|cargo|clippy-driver|rustdoc|cc1?|cc1plus|as|ld|collect2|lto_cgu\.[0-9]+|opt_cgu\.[0-9]+|coordinator|build-script-[^;]*|jobserver)[;]'

command -v perf >/dev/null || apt-get install -y linux-perf
command -v inferno-flamegraph >/dev/null || cargo install --locked inferno
export PATH=$HOME/.cargo/bin:$PATH

WORK=$(mktemp -d /dev/shm/eddy-profile.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The suite's notes (stderr) say when a run starts ("eddy bench suite: eddy-lib (...)") and
# when a phase has ended ("  ior-easy-write ..."): one perf per run, started disabled before
# the suite (perf takes a while to start), is enabled in between through its control fifo.
for via in mount lib; do
  mkfifo "$WORK/$via.ctl" "$WORK/$via.ack"
  perf record -D -1 --control "fifo:$WORK/$via.ctl,$WORK/$via.ack" -F "$FREQ" -a -g \
    --call-graph dwarf,16384 -o "$WORK/$via.data" >"$WORK/$via.perf" 2>&1 &
  echo $! >"$WORK/$via.pid"
done
sleep 2
ctl() { # ctl VIA enable|disable: waits for perf's ack
  echo "$2" >"$WORK/$1.ctl"
  read -r _ <"$WORK/$1.ack"
}
on=
"$BIN/eddy" bench suite --hosts 3 --placement local --procs 3 --workloads ior-easy \
  --scale "$SCALE" 2>&1 >"$WORK/suite.out" | while IFS= read -r line; do
  printf '%s\n' "$line" >&2
  case $line in
    "eddy bench suite: eddy ("*) on=mount; ctl mount enable ;;
    "eddy bench suite: eddy-lib ("*) on=lib; ctl lib enable ;;
    *ior-easy-write*) [ -z "$on" ] || ctl "$on" disable; on= ;;
  esac
done
for via in mount lib; do
  kill -INT "$(cat "$WORK/$via.pid")"
done
wait
cat "$WORK/suite.out"

for via in lib mount; do
  [ -s "$WORK/$via.data" ] || { echo "no samples of the $via run" >&2; exit 1; }
  # --no-inline: inline frames would be resolved by addr2line, slowly.
  # Compilers running beside (rustc and its code generation threads, cc, ld) are left out.
  perf script --no-inline -i "$WORK/$via.data" 2>/dev/null | inferno-collapse-perf |
    grep -vE "$OTHERS" >"$WORK/$via.folded" || true
  inferno-flamegraph --title "Eddy: ior-easy write through the $via, $TAG (3 hosts (netns), placement local, 3 procs, tmpfs)" \
    <"$WORK/$via.folded" >"$OUT/profile-ior-easy-$via-$TAG.svg"
  echo "== $via: $OUT/profile-ior-easy-$via-$TAG.svg"
  summarize "$WORK/$via.folded" 15
done
