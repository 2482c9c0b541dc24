#!/usr/bin/env bash
# Installs what building and testing Eddy needs on a fresh Debian machine. Idempotent.
set -euo pipefail

# slurm-wlm and munge: crates/eddy-bb/tests/slurm/slurm.rs brings up a private Slurm cluster.
# openmpi-bin: `eddy bench --mpi` launches its workers with mpirun (tested in tests/ops/bench.rs).
# libopenmpi-dev and gcc: crates/eddy-preload/tests/preload/preload.rs builds C and MPI programs (mpicc) that run under
# libeddy_preload.so.
# glusterfs-server and glusterfs-client: crates/eddy-testkit/src/gluster.rs serves a real
# network file system (a GlusterFS volume on this host) as a backend directory.
# iproute2: tests/faults/netns.rs puts daemons in network namespaces; tests/faults/netns/alloc.rs
# (eddy bench alloc) also limits links with its tc. util-linux: setpriv, for tests that act as
# another user on a mount, and unshare, for bench alloc's compute nodes (a host name each). rsync, attr (setfattr/getfattr), python3: tools the
# tests drive the mount with.
# python3-h5py: crates/eddy-fuse/tests/posix/locks.rs runs HDF5 on the mount (with /usr/bin/python3, the
# interpreter Debian's h5py is built for).
# python3-venv: the PyDarshan venv below (crates/eddy-history/tests/darshan.rs).
# postgresql: the I/O history's PostgreSQL tests (crates/eddy-history/src/db/tests.rs,
# crates/eddy-cli/tests/ops/history.rs) start a private server from its binaries
# (/usr/lib/postgresql/<version>/bin) as the postgres system user the package makes.
# prometheus: crates/eddy-cli/tests/ops/metrics.rs starts its own Prometheus server (the package
# may also start a system service; the test never uses it) that scrapes the daemons' /metrics.
# slurmdbd, mariadb-server and mariadb-client: the private Slurm's opt-in accounting
# (eddy_testkit::slurm, `.accounting()`: a private MariaDB server and slurmdbd) for
# crates/eddy-bb/tests/slurm/walltime.rs and burst_buffer.rs (staging timed by predicted
# walltime), which read real `sacct` (package slurm-client, pulled in by slurm-wlm).
# strace: crates/eddy-preload/tests/preload/preload_meta.rs counts the system calls of a create through
# the preload library.
# xfsprogs: crates/eddy-fuse/tests/posix/full_deployment.rs fills a deployment with xfs_io's falloc
# (fallocate as file-system test suites call it).
# fio: crates/eddy-fuse/tests/posix/mixed_io.rs runs the issue's nine-job mixed-engine fio run
# (sync, libaio, posixaio, splice, mmap, with and without O_DIRECT) through a mount, in a loop.
# A test whose tool is missing fails and names it (crates/eddy-testkit/src/require.rs).
PACKAGES=(fuse3 pkg-config iproute2 util-linux procps tar diffutils findutils coreutils fonts-dejavu-core build-essential
  slurm-wlm munge openmpi-bin libopenmpi-dev glusterfs-server glusterfs-client rsync attr python3 python3-h5py python3-venv postgresql
  prometheus slurmdbd mariadb-server mariadb-client strace xfsprogs fio)

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# FUSE: the kernel module, and its control file system (tests abort a mount's connection
# through /sys/fs/fuse/connections).
if [ ! -e /dev/fuse ]; then
  $SUDO modprobe fuse || echo "warning: /dev/fuse is missing and \`modprobe fuse\` failed; FUSE tests will fail" >&2
fi
if [ -d /sys/fs/fuse/connections ] && ! mountpoint -q /sys/fs/fuse/connections; then
  $SUDO mount -t fusectl fusectl /sys/fs/fuse/connections ||
    echo "warning: cannot mount fusectl on /sys/fs/fuse/connections; a FUSE test will fail" >&2
fi

# FUSE: let mounts made with allow_other work for non-root users too.
if [ -w /etc/fuse.conf ] && ! grep -q '^user_allow_other' /etc/fuse.conf; then
  echo user_allow_other >> /etc/fuse.conf
fi

# GlusterFS refuses localhost and 127.0.0.1 as brick hosts: give the test bricks a host name of
# their own that resolves to a loopback address (any 127.x address reaches this host on Linux).
GLUSTER_HOST_ENTRY="127.0.1.77 eddy-gluster-host"
if ! grep -Eq '^[[:space:]]*127\.0\.1\.77[[:space:]]+eddy-gluster-host([[:space:]]|$)' /etc/hosts; then
  if [ -w /etc/hosts ]; then
    echo "$GLUSTER_HOST_ENTRY" >> /etc/hosts
  else
    echo "$GLUSTER_HOST_ENTRY" | sudo tee -a /etc/hosts >/dev/null
  fi
fi

# Rust: the workspace needs a toolchain of 1.90 or newer (fjall's minimum).
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
if ! command -v cargo >/dev/null 2>&1; then
  echo "error: cargo not found. Install Rust 1.90 or newer (https://rustup.rs) and run this again." >&2
  exit 1
fi
ver=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n1.90.0\n' "$ver" | sort -V | head -1)" != "1.90.0" ]; then
  echo "error: rustc $ver is too old; Eddy needs 1.90 or newer (rustup update)." >&2
  exit 1
fi

# pjdfstest, the public POSIX conformance suite (its Rust edition, from crates.io):
# crates/eddy-fuse/tests/posix/posix_suite.rs runs it on a mount.
PJDFSTEST_VERSION=0.2.2
if ! pjdfstest --version 2>/dev/null | grep -qx "pjdfstest $PJDFSTEST_VERSION"; then
  echo "installing: pjdfstest $PJDFSTEST_VERSION (cargo install)"
  cargo install --locked --quiet pjdfstest --version "$PJDFSTEST_VERSION"
fi

# mdBook builds the user and admin guide (docs/guide: `make docs`, which `make test` runs, into
# target/book). About 4 minutes of CPU to build from crates.io, once per machine.
MDBOOK_VERSION=0.5.4
if ! mdbook --version 2>/dev/null | grep -qx "mdbook v$MDBOOK_VERSION"; then
  echo "installing: mdbook $MDBOOK_VERSION (cargo install)"
  cargo install --locked --quiet mdbook --version "$MDBOOK_VERSION"
fi

# cbindgen: libeddy's header (crates/eddy-c/include/eddy.h) is generated from the crate's
# source; `make test` regenerates it and fails when the committed one differs
# (scripts/check-c-header.sh, decision 0066). A tool, pinned, not a build dependency: building
# the library does not compile cbindgen's parser. About 5 minutes of CPU, once per machine.
CBINDGEN_VERSION=0.29.0
if ! cbindgen --version 2>/dev/null | grep -qx "cbindgen $CBINDGEN_VERSION"; then
  echo "installing: cbindgen $CBINDGEN_VERSION (cargo install)"
  cargo install --locked --quiet cbindgen --version "$CBINDGEN_VERSION"
fi

# PyDarshan (the `darshan` package from PyPI, which bundles libdarshan-util): `eddy history
# import` reads Darshan logs with it, and crates/eddy-history/tests/darshan.rs imports the
# logs it ships. Debian 12 refuses system-wide pip, so it lives in a venv of its own, the
# interpreter Eddy runs unless EDDY_PYDARSHAN names another.
PYDARSHAN_VENV=/opt/eddy/pydarshan-venv
PYDARSHAN_VERSION=3.5.0
if ! "$PYDARSHAN_VENV/bin/python" -c "import darshan, sys; sys.exit(darshan.__version__ != '$PYDARSHAN_VERSION')" 2>/dev/null; then
  echo "installing: darshan $PYDARSHAN_VERSION (pip, in $PYDARSHAN_VENV)"
  $SUDO mkdir -p "$(dirname "$PYDARSHAN_VENV")"
  $SUDO python3 -m venv "$PYDARSHAN_VENV"
  $SUDO "$PYDARSHAN_VENV/bin/pip" install --quiet --disable-pip-version-check "darshan==$PYDARSHAN_VERSION"
fi

# maturin builds the Python package (crates/eddy-py: `make wheel`, and crates/eddy-py/tests/pytest.rs
# before it runs pytest), in a venv of its own as PyDarshan (Debian 12 refuses system-wide pip).
# 1.9.4 or later: it tells PyO3 it builds an extension module (decision 0067).
MATURIN_VENV=/opt/eddy/maturin-venv
MATURIN_VERSION=1.9.6
if ! "$MATURIN_VENV/bin/maturin" --version 2>/dev/null | grep -qx "maturin $MATURIN_VERSION"; then
  echo "installing: maturin $MATURIN_VERSION (pip, in $MATURIN_VENV)"
  $SUDO mkdir -p "$(dirname "$MATURIN_VENV")"
  $SUDO /usr/bin/python3 -m venv "$MATURIN_VENV"
  $SUDO "$MATURIN_VENV/bin/pip" install --quiet --disable-pip-version-check "maturin==$MATURIN_VERSION"
fi
