#!/usr/bin/env bash
# `make fuzz`: the fuzz targets of crates/eddy-fuzz under libFuzzer (coverage-guided, on the
# stable toolchain: the instrumentation cargo-fuzz uses with `--sanitizer none`), RUNS inputs
# each, then the whole-daemon storm (crates/eddy-daemon/tests/faults/fuzz_daemon.rs) with RUNS frames.
# The kept corpus (crates/eddy-fuzz/corpus/<target>/, replayed by `make test`) seeds the run;
# new inputs go to target/fuzz/corpus/<target>/ (MERGE=1 merges those that add coverage into
# the kept corpus). A crash leaves its input in target/fuzz/artifacts/<target>/ and fails.
#   RUNS=1000000 (default)   SEED=1   TARGETS="frames requests daemon"   MERGE=0
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-1000000}
SEED=${SEED:-1}
TARGETS=${TARGETS:-frames requests daemon}
CARGO=${CARGO:-cargo}
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
OUT=${CARGO_TARGET_DIR:-target}/fuzz
# --target keeps build scripts and proc macros uninstrumented; the rest gets libFuzzer's
# coverage counters, comparison tracing, debug assertions and overflow checks.
FLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
 -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing \
 -Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cdebug-assertions -Coverflow-checks"

for t in $TARGETS; do
  [ "$t" = daemon ] && continue
  echo "== fuzz target $t: $RUNS inputs (seed $SEED)"
  RUSTFLAGS="$FLAGS" $CARGO build --release -p eddy-fuzz --features libfuzzer --bin "fuzz-$t" \
    --target "$TRIPLE" --target-dir "$OUT"
  mkdir -p "$OUT/artifacts/$t" "$OUT/corpus/$t"
  start=$(date +%s)
  "$OUT/$TRIPLE/release/fuzz-$t" -runs="$RUNS" -seed="$SEED" -max_len=4096 -timeout=60 \
    -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$OUT/artifacts/$t/" \
    "$OUT/corpus/$t" "crates/eddy-fuzz/corpus/$t"
  if [ "${MERGE:-0}" = 1 ]; then
    "$OUT/$TRIPLE/release/fuzz-$t" -merge=1 "crates/eddy-fuzz/corpus/$t" "$OUT/corpus/$t"
  fi
  echo "== fuzz target $t: $RUNS inputs in $(( $(date +%s) - start )) s"
done

if [[ " $TARGETS " == *" daemon "* ]]; then
  echo "== whole-daemon storm: $RUNS frames"
  $CARGO build --bins
  start=$(date +%s)
  EDDY_FUZZ_FRAMES="$RUNS" $CARGO test -p eddy-daemon --test faults -- fuzz_daemon:: --nocapture
  echo "== whole-daemon storm: $RUNS frames in $(( $(date +%s) - start )) s"
fi
