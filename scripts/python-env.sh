#!/usr/bin/env bash
# The venv the tests of the Python package import from (crates/eddy-py/tests/pytest.rs): VENV made
# with Debian's Python (or $EDDY_PYTHON) and the pinned packages of REQUIREMENTS from PyPI
# (numpy, pandas, pyarrow, zarr, xarray, fsspec, pytest). Idempotent: nothing is done when the
# venv was made from the same requirements. `make python-test-env` runs it; so does the test.
# Usage: scripts/python-env.sh VENV REQUIREMENTS
set -euo pipefail
venv=$1
reqs=$2
stamp="$venv/eddy-requirements.txt"
if [ -x "$venv/bin/python" ] && cmp -s "$reqs" "$stamp"; then
  exit 0
fi
python=${EDDY_PYTHON:-/usr/bin/python3}
echo "python-env: $venv from $reqs (pip, from PyPI)"
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$reqs"
cp "$reqs" "$stamp"
