# Eddy: the two commands of the README are `make demo` and `make test`.
# Both install what a fresh Debian machine lacks first (scripts/install-deps.sh).

CARGO ?= cargo
RELEASE := target/release

.PHONY: deps build demo test bench lint clean

deps:
	bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --bins

## Local daemons, a FUSE mount, a workload and the figures (raw storage beside Eddy).
demo: build
	bash scripts/demo.sh $(RELEASE)

## Every test: unit, property and integration tests (real daemons, real FUSE mounts, netns hosts).
test: deps
	$(CARGO) build --bins
	$(CARGO) test --workspace --no-fail-fast

## The benchmark suite: Eddy beside the raw storage, with ratios and a plot.
bench: build
	$(RELEASE)/eddy bench suite --plot docs/bench-suite.png --json docs/bench-suite.json

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
