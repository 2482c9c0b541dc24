# Eddy: the two commands of the README are `make demo` and `make test`.
# Both install what a fresh Debian machine lacks first (scripts/install-deps.sh).

CARGO ?= cargo
# Where cargo puts the release binaries (CARGO_TARGET_DIR, as cargo itself, else ./target).
RELEASE := $(or $(CARGO_TARGET_DIR),target)/release

.PHONY: deps build install wheel python-test-env check-c-header demo demo-slurm test test-fast test-io-uring soak fuzz crash-cycles bench bench-tier bench-streams bench-streams-gluster bench-merging bench-deploy lint lint-privileged lint-file-size check-architecture check-client-layers docs clean

deps:
	bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --bins
	$(CARGO) build --release -p eddy-preload -p eddy-c

## Installs into PREFIX: the CLI (eddy, eddyd) and the preload library in PREFIX/bin and
## PREFIX/lib, libeddy (PREFIX/lib/libeddy.so, soname libeddy.so.1), its header
## (PREFIX/include/eddy.h) and pkg-config file (PREFIX/lib/pkgconfig/eddy.pc). Builds the
## release first; PROFILE=debug NO_BUILD=1 installs what `cargo build` made instead (the
## tests of crates/eddy-c do, their build already done).
PREFIX ?= /usr/local
PROFILE ?= release
OUT := $(or $(CARGO_TARGET_DIR),target)/$(PROFILE)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
install: $(if $(NO_BUILD),,build)
	install -d $(PREFIX)/bin $(PREFIX)/lib/pkgconfig $(PREFIX)/include
	install -m 755 $(OUT)/eddy $(OUT)/eddyd $(PREFIX)/bin/
	install -m 755 $(OUT)/libeddy_preload.so $(PREFIX)/lib/
	install -m 755 $(OUT)/libeddy.so $(PREFIX)/lib/libeddy.so.1
	ln -sf libeddy.so.1 $(PREFIX)/lib/libeddy.so
	install -m 644 crates/eddy-c/include/eddy.h $(PREFIX)/include/
	sed -e 's|@PREFIX@|$(abspath $(PREFIX))|' -e 's|@VERSION@|$(VERSION)|' \
	  crates/eddy-c/eddy.pc.in > $(PREFIX)/lib/pkgconfig/eddy.pc

## The Python package (crates/eddy-py, decision 0067): one abi3 wheel for Python 3.9 and later,
## built by maturin in release, into target/wheels/ (of CARGO_TARGET_DIR when set). maturin is
## installed by scripts/install-deps.sh (in /opt/eddy/maturin-venv); PYO3_PYTHON is the
## interpreter PyO3 asks for its configuration (any 3.9+: the wheel is abi3).
TARGET := $(or $(CARGO_TARGET_DIR),target)
MATURIN ?= /opt/eddy/maturin-venv/bin/maturin
PYO3_PYTHON ?= /usr/bin/python3
export PYO3_PYTHON
wheel: deps
	$(MATURIN) build --release --manifest-path crates/eddy-py/Cargo.toml --interpreter $(PYO3_PYTHON) --out $(TARGET)/wheels

## The venv the Python package's tests import from (crates/eddy-py/tests/pytest.rs): the pinned
## numpy, pandas, pyarrow, zarr, xarray, fsspec and pytest of crates/eddy-py/requirements-test.txt,
## from PyPI, in $(TARGET)/python-test-venv. Kept while the requirements stay the same.
python-test-env:
	bash scripts/python-env.sh $(TARGET)/python-test-venv crates/eddy-py/requirements-test.txt

## libeddy's header against the crate (decision 0066): cbindgen makes it afresh, and a
## difference from the committed crates/eddy-c/include/eddy.h fails. Needs cbindgen (deps).
check-c-header:
	bash scripts/check-c-header.sh

## Local daemons, a FUSE mount, a workload and the figures (raw storage beside Eddy).
demo: build
	bash scripts/demo.sh $(RELEASE)

## Eddy as Slurm's burst buffer: a private 3-node Slurm on this host, a job's whole life.
demo-slurm: build
	bash scripts/demo-slurm.sh $(RELEASE)

## Every test: unit, property and integration tests (real daemons, real FUSE mounts, netns hosts),
## the guide's examples among them (crates/eddy-cli/tests/guide), after the checks of the docs.
## In two lanes (scripts/test-lanes.py): the fast lane (unit and property tests, the daemon and
## the client against real daemons of this host: no root, no services) runs as FAST_USER when
## root runs `make test`, which checks that it needs neither; the root lane runs the rest. Both
## always run; each prints the time of every test binary. One test at a time in each
## integration binary: such a test brings a whole deployment (three or more daemons, FUSE
## mounts, Slurm, GlusterFS), and two at once on a 2-core machine starve each other's deadlines.
## Then the io_uring lane: the mount's suites that exercise its FUSE transport (pjdfstest, the
## fsx-style random I/O, the POSIX operations, the property test, locks, mixed engines) again
## over FUSE io_uring, with the kernel's fuse.enable_uring set to Y for the lane and restored
## after it (decision 0079); on a kernel without it they fail, naming why.
FAST_USER ?= nobody
test: deps python-test-env lint-privileged lint-file-size check-architecture check-client-layers check-c-header docs
	$(CARGO) build --bins
	$(CARGO) build -p eddy-preload -p eddy-c
	python3 scripts/test-lanes.py fast --as $(FAST_USER); fast=$$?; \
	  python3 scripts/test-lanes.py root; root=$$?; \
	  python3 scripts/test-lanes.py uring; uring=$$?; \
	  test $$fast -eq 0 && test $$root -eq 0 && test $$uring -eq 0

## The io_uring lane alone (root): the mount's transport suites over FUSE io_uring.
test-io-uring:
	$(CARGO) build --bins
	python3 scripts/test-lanes.py uring

## The fast lane alone, as the calling user (no root, no services, no set-up): unit and property
## tests, the daemon's request and lifecycle tests, the fuzz corpora, the client library's tests.
test-fast:
	$(CARGO) build --bins
	python3 scripts/test-lanes.py fast

## The random-operation verifier (fsx-style, crates/eddy-testkit/src/fsx.rs) with a million steps
## per front-end (mount with and without passthrough, preload, library), and the mixed-engine
## fio run of issue 39 for 20 rounds (`make test` runs 3000 steps and 3 rounds).
SOAK_OPS ?= 1000000
SOAK_FIO_ROUNDS ?= 20
soak: deps
	$(CARGO) build --bins
	$(CARGO) build -p eddy-preload
	EDDY_FSX_OPS=$(SOAK_OPS) EDDY_FIO_ROUNDS=$(SOAK_FIO_ROUNDS) $(CARGO) test -p eddy-fuse --test posix -- fsx:: mixed_io:: --test-threads=1

## The fuzz targets (crates/eddy-fuzz) under libFuzzer, coverage-guided, a million inputs each,
## and the whole-daemon storm with a million frames (`make test` runs them bounded).
FUZZ_RUNS ?= 1000000
fuzz: deps
	RUNS=$(FUZZ_RUNS) CARGO=$(CARGO) bash scripts/fuzz.sh

## Crash cycles in full: rounds of kill -9 of every daemon (and of a FUSE mount) during writes
## and fsyncs, a restart on the same storage, every fsync'd byte checked (`make test` runs 5).
CRASH_ROUNDS ?= 100
crash-cycles: deps
	$(CARGO) build --bins
	EDDY_CRASH_ROUNDS=$(CRASH_ROUNDS) $(CARGO) test -p eddy-daemon --test faults -- crash_cycles:: --nocapture

## The benchmark suite: Eddy beside the raw storage, with ratios and a plot.
bench: build
	$(RELEASE)/eddy bench suite --preload --plot docs/guide/figures/bench-suite.png --json docs/bench-suite.json

## Stream hints (decision 0072): 8 concurrent cold readers, sequential and strided, through the
## mount and the library, hints on and off, against the direct backend read.
bench-streams: build
	$(RELEASE)/eddy bench tier --streams --json docs/bench-streams-dir.json

## The stream phases against a GlusterFS volume whose bricks wait 2 ms before every read.
bench-streams-gluster: build
	bash scripts/gluster-volume.sh up $(GLUSTER_BENCH_DIR)-slow 2 2000
	$(RELEASE)/eddy bench tier --streams --backend $(GLUSTER_BENCH_DIR)-slow/mnt --json docs/bench-streams-gluster.json; \
	  rc=$$?; bash scripts/gluster-volume.sh down $(GLUSTER_BENCH_DIR)-slow; exit $$rc

## The backend tier beside the backend used directly: a plain directory, then a GlusterFS volume.
GLUSTER_BENCH_DIR ?= /var/tmp/eddy-bench-gluster
bench-tier: build
	$(RELEASE)/eddy bench tier --json docs/bench-tier-dir.json
	bash scripts/gluster-volume.sh up $(GLUSTER_BENCH_DIR)
	$(RELEASE)/eddy bench tier --backend $(GLUSTER_BENCH_DIR)/mnt --json docs/bench-tier-gluster.json; \
	  rc=$$?; bash scripts/gluster-volume.sh down $(GLUSTER_BENCH_DIR); exit $$rc

## Per-object merging of the write-back (decision 0074): an ior-hard file staged out with merging
## on and off, to a plain directory, then to a GlusterFS volume (hashed, then local placement).
bench-merging: build
	$(RELEASE)/eddy bench tier --merging --json docs/bench-merging-dir.json
	bash scripts/gluster-volume.sh up $(GLUSTER_BENCH_DIR)
	echo 'placement = "local"' > $(GLUSTER_BENCH_DIR)/local.toml
	$(RELEASE)/eddy bench tier --merging --backend $(GLUSTER_BENCH_DIR)/mnt --json docs/bench-merging-gluster.json && \
	  $(RELEASE)/eddy bench tier --merging --backend $(GLUSTER_BENCH_DIR)/mnt --config $(GLUSTER_BENCH_DIR)/local.toml \
	    --json docs/bench-merging-gluster-local.json; \
	  rc=$$?; bash scripts/gluster-volume.sh down $(GLUSTER_BENCH_DIR); exit $$rc

## Starting and stopping many local daemons (decision 0076): eddy start --local 256 and 1024
## (roots on /var/tmp, 1 MiB metadata reserve each), the stop, an idle daemon's memory.
bench-deploy: build
	$(RELEASE)/eddy bench deploy --daemons 256,1024 --json docs/bench-deploy.json

## The privileged-path lint: every path-based file call in the code that runs as root or
## SlurmUser (scripts/privileged-files.txt) goes through a directory descriptor, runs as the
## job's user, or says on its line why a job's user cannot redirect it. No build needed.
lint-privileged:
	python3 scripts/lint-privileged.py --self-test
	python3 scripts/lint-privileged.py

## ARCHITECTURE.md against the crates (sections, dependencies, layers, paths), every decision's
## header, the guide's chapters and every relative link of the docs (decision 0064). No build needed.
check-architecture:
	python3 scripts/check-architecture.py --self-test
	python3 scripts/check-architecture.py

## The user and admin guide (docs/guide, docs/book.toml) built with mdBook into target/book;
## scripts/install-deps.sh installs mdbook when it is missing.
docs:
	command -v mdbook >/dev/null 2>&1 || bash scripts/install-deps.sh
	mdbook build docs

## No source file over 800 lines, but those of scripts/file-size-allow.txt (decision 0065).
lint-file-size:
	python3 scripts/lint-file-size.py --self-test
	python3 scripts/lint-file-size.py

## Only the client's namespace and data layers send requests, each its own (decision 0068).
## No build needed.
check-client-layers:
	python3 scripts/check-client-layers.py --self-test
	python3 scripts/check-client-layers.py

lint: lint-privileged lint-file-size check-architecture check-client-layers
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
