#!/usr/bin/env bash
# The demo: a burst buffer in front of a "parallel file system" (a plain directory here): 3 local
# daemons and a FUSE mount with /pfs linked to it, a job that stages its inputs in, works on them
# (copy, archive, search, verify) with scratch beside, writes results that are staged out and
# checked in the backend; the deployment's status; then the benchmark figures of the mount and of
# the client library beside the raw storage measured in the same run, and of the backend tier
# beside the backend read and written directly; what the daemons counted of the job's I/O while
# it ran (eddy stats) and, once stopped, the job's profile in the I/O history and its plot.
# Everything is stopped and removed at the end, the plot aside.
set -euo pipefail

BIN=${1:-target/release}
EDDY="$BIN/eddy"
DIR=${EDDY_DEMO_DIR:-/tmp/eddy-demo}
STATE="$DIR/storage"
MNT="$DIR/mnt"
RAW="$DIR/raw"
PFS="$DIR/pfs"
DB="$DIR/history.db"
PLOT="${EDDY_DEMO_OUT:-/tmp}/eddy-demo-profile.png"

step() { printf '\n== %s\n' "$*"; }

cleanup() {
  "$EDDY" stop --state "$STATE" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
cleanup
trap cleanup EXIT
mkdir -p "$MNT" "$RAW" "$PFS/inputs" "$PFS/results"

step "the parallel file system: inputs of the job in $PFS"
SRC=/usr/share/doc
cp -r "$SRC" "$PFS/inputs/doc"
dd if=/dev/urandom of="$PFS/inputs/blob" bs=1M count=64 status=none
echo "$(find "$PFS/inputs" -type f | wc -l) input files ($(du -sh "$PFS/inputs" | cut -f1))"

step "start: 3 daemons on this host, /pfs linked to $PFS, mounted at $MNT, the I/O history in $DB"
printf 'history_db = "%s"\n' "$DB" > "$DIR/eddy.toml"
"$EDDY" start --local 3 --root "$STATE" --mount "$MNT" --link "/pfs=$PFS" --config "$DIR/eddy.toml"
echo "listed before any data moved: $(ls "$MNT/pfs/inputs" | tr '\n' ' ')"

step "stage-in: every daemon fetches its own chunks of the inputs, in parallel"
"$EDDY" stage-in --state "$STATE" /pfs/inputs | tail -n 3   # a line per file; the last ones

step "job: read the inputs, copy them to scratch, archive, search, verify every byte; results to /pfs/results"
cmp "$PFS/inputs/blob" "$MNT/pfs/inputs/blob"
echo "64 MiB input blob read through Eddy: identical"
cp -r "$MNT/pfs/inputs/doc" "$MNT/doc"
files=$(find "$MNT/doc" -type f | wc -l)
echo "copied $files files ($(du -sh "$MNT/doc" | cut -f1))"
tar -C "$MNT" -cf "$MNT/doc.tar" doc
mkdir "$MNT/untar" && tar -C "$MNT/untar" -xf "$MNT/doc.tar"
diff -r --no-dereference "$SRC" "$MNT/untar/doc"
echo "archive round trip: identical (every file, directory and link)"
echo "copyright files found: $(find "$MNT/doc" -name copyright | wc -l)"
tar -C "$MNT" -czf "$MNT/pfs/results/doc.tar.gz" doc
find "$MNT/doc" -name copyright | sort > "$MNT/pfs/results/copyrights.txt"
dd if=/dev/urandom of="$RAW/blob" bs=1M count=256 status=none
dd if="$RAW/blob" of="$MNT/blob" bs=1M status=none
cmp "$RAW/blob" "$MNT/blob"
echo "256 MiB blob: identical"
rm -rf "$MNT/untar" "$MNT/doc.tar" "$RAW/blob"

step "status: cached, dirty and pinned bytes per daemon"
"$EDDY" status --state "$STATE"

step "stats: what each daemon served, per daemon and per client, and the job's profile so far"
"$EDDY" stats --state "$STATE"
"$EDDY" stats --state "$STATE" --job

step "stage-out: the results go back to the parallel file system"
"$EDDY" stage-out --state "$STATE" /pfs/results
cmp "$MNT/pfs/results/doc.tar.gz" "$PFS/results/doc.tar.gz"
cmp "$MNT/pfs/results/copyrights.txt" "$PFS/results/copyrights.txt"
echo "results in the backend: identical ($(ls "$PFS/results" | tr '\n' ' '))"

step "figures: the same workloads on the Eddy mount, through the client library, and on the raw storage under them"
"$EDDY" bench run "$MNT" --procs 2 --scale 0.25 --label eddy --json "$DIR/eddy.json"
"$EDDY" bench run "eddy:$STATE" --procs 2 --scale 0.25 --label eddy-lib --json "$DIR/eddy-lib.json"
"$EDDY" bench run "$RAW" --procs 2 --scale 0.25 --label raw --json "$DIR/raw.json"
step "ratios: mount / raw"
"$EDDY" bench compare "$DIR/raw.json" "$DIR/eddy.json"
step "ratios: client library / raw"
"$EDDY" bench compare "$DIR/raw.json" "$DIR/eddy-lib.json"
step "figures: the backend tier beside the backend read and written directly"
mkdir -p "$DIR/tier"
"$EDDY" bench tier --storage "$DIR/tier" --size 128MiB

step "stop: the daemons' counters become the job's profile in the I/O history"
"$EDDY" stop --state "$STATE"

step "the job's profile, from the history"
"$EDDY" history list --db "$DB"
JOB=$("$EDDY" history list --db "$DB" --json | python3 -c 'import json, sys; print(json.load(sys.stdin)[0]["key"])')
"$EDDY" history show "$JOB" --db "$DB"
"$EDDY" history plot "$JOB" --db "$DB" --out "$PLOT"
echo "the profile's plot (bandwidth and IOPS per daemon over time, request sizes, metadata ops): $PLOT"
echo "what to read next: docs/guide/getting-started.md and the rest of the guide (make docs builds it into target/book)"
