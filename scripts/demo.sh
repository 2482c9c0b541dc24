#!/usr/bin/env bash
# The demo: 3 local daemons and a FUSE mount, a real workload (copy, archive, search, verify),
# the deployment's status, then the benchmark figures of the mount and of the client library
# beside the raw storage measured in the same run. Everything is stopped and removed at the end.
set -euo pipefail

BIN=${1:-target/release}
EDDY="$BIN/eddy"
DIR=${EDDY_DEMO_DIR:-/tmp/eddy-demo}
STATE="$DIR/storage"
MNT="$DIR/mnt"
RAW="$DIR/raw"

step() { printf '\n== %s\n' "$*"; }

cleanup() {
  "$EDDY" stop --state "$STATE" >/dev/null 2>&1 || true
  rm -rf "$DIR"
}
cleanup
trap cleanup EXIT
mkdir -p "$MNT" "$RAW"

step "start: 3 daemons on this host, mounted at $MNT"
"$EDDY" start --local 3 --root "$STATE" --mount "$MNT"

step "workload: copy a tree in, archive it, search it, verify every byte"
SRC=/usr/share/doc
cp -r "$SRC" "$MNT/doc"
files=$(find "$MNT/doc" -type f | wc -l)
echo "copied $files files ($(du -sh "$MNT/doc" | cut -f1))"
tar -C "$MNT" -cf "$MNT/doc.tar" doc
mkdir "$MNT/untar" && tar -C "$MNT/untar" -xf "$MNT/doc.tar"
diff -r --no-dereference "$SRC" "$MNT/untar/doc"
echo "archive round trip: identical (every file, directory and link)"
echo "copyright files found: $(find "$MNT/doc" -name copyright | wc -l)"
dd if=/dev/urandom of="$RAW/blob" bs=1M count=256 status=none
dd if="$RAW/blob" of="$MNT/blob" bs=1M status=none
cmp "$RAW/blob" "$MNT/blob"
echo "256 MiB blob: identical"
rm -rf "$MNT/untar" "$MNT/doc.tar" "$RAW/blob"

step "status"
"$EDDY" status --state "$STATE"

step "figures: the same workloads on the Eddy mount, through the client library, and on the raw storage under them"
"$EDDY" bench run "$MNT" --procs 2 --scale 0.25 --label eddy --json "$DIR/eddy.json"
"$EDDY" bench run "eddy:$STATE" --procs 2 --scale 0.25 --label eddy-lib --json "$DIR/eddy-lib.json"
"$EDDY" bench run "$RAW" --procs 2 --scale 0.25 --label raw --json "$DIR/raw.json"
step "ratios: mount / raw"
"$EDDY" bench compare "$DIR/raw.json" "$DIR/eddy.json"
step "ratios: client library / raw"
"$EDDY" bench compare "$DIR/raw.json" "$DIR/eddy-lib.json"

step "stop"
"$EDDY" stop --state "$STATE"
