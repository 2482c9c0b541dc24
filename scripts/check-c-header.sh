#!/usr/bin/env bash
# libeddy's header against its source (decision 0066): generates crates/eddy-c/include/eddy.h
# afresh with cbindgen (crates/eddy-c/cbindgen.toml) and fails, showing the difference, when
# the committed header differs. `--write` writes the fresh header in its place instead.
set -euo pipefail
cd "$(dirname "$0")/../crates/eddy-c"
command -v cbindgen >/dev/null || { echo "cbindgen is missing: run scripts/install-deps.sh" >&2; exit 1; }
fresh=$(mktemp --suffix=.h)
trap 'rm -f "$fresh"' EXIT
cbindgen --quiet --config cbindgen.toml --crate eddy-c --output "$fresh" .
if [ "${1:-}" = "--write" ]; then
  cp "$fresh" include/eddy.h
  echo "wrote crates/eddy-c/include/eddy.h"
  exit 0
fi
if ! diff -u include/eddy.h "$fresh"; then
  echo "crates/eddy-c/include/eddy.h is not what cbindgen makes of the crate:" \
    "run scripts/check-c-header.sh --write and commit it" >&2
  exit 1
fi
echo "crates/eddy-c/include/eddy.h matches the crate"
# The guide's C reference is made from the header: it must be the header's too.
python3 ../../scripts/c-reference.py --check
