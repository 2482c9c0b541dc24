#!/usr/bin/env python3
"""Fails when a Rust source file of the repository is longer than the limit (800 lines).

A file that long holds several things: split it along its seams into modules named for
what they hold, each opening with a `//!` line saying its purpose, and re-export what other
crates use so that their paths stay as they are. Files that may still be over for now are
named in scripts/file-size-allow.txt (one path a line, `#` comments); an entry that is no
longer over is reported too, so the list only shrinks.

Run by `make lint` and `make test`; `--self-test` checks the check itself.
"""

import os
import sys
import tempfile

LIMIT = 800
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOW = os.path.join("scripts", "file-size-allow.txt")
# third_party/ holds upstream code patched in place (its README says what changed): it keeps
# upstream's shape, so that the patch stays small enough to send back.
SKIP_DIRS = {"target", ".git", "node_modules", "third_party"}


def rust_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            if name.endswith(".rs"):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def line_count(path):
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def allowed(root):
    path = os.path.join(root, ALLOW)
    if not os.path.exists(path):
        return set()
    with open(path, encoding="utf-8") as f:
        return {
            line.split("#", 1)[0].strip()
            for line in f
            if line.split("#", 1)[0].strip()
        }


def check(root):
    """The problems found under `root`, as lines to print."""
    allow = allowed(root)
    problems = []
    over = set()
    for rel in rust_files(root):
        n = line_count(os.path.join(root, rel))
        if n > LIMIT:
            over.add(rel)
            if rel not in allow:
                problems.append(
                    f"{rel}: {n} lines, over {LIMIT}: split it into modules named for what "
                    f"they hold (each opening with a `//!` purpose line), re-exporting what "
                    f"other crates use"
                )
    for rel in sorted(allow - over):
        problems.append(
            f"{ALLOW}: {rel} is no longer over {LIMIT} lines (or is gone): remove it from the list"
        )
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        os.makedirs(os.path.join(d, "crates/a/src"))
        os.makedirs(os.path.join(d, "scripts"))
        with open(os.path.join(d, "crates/a/src/big.rs"), "w") as f:
            f.write("//! big\n" * (LIMIT + 1))
        with open(os.path.join(d, "crates/a/src/small.rs"), "w") as f:
            f.write("//! small\n" * LIMIT)
        got = check(d)
        assert len(got) == 1 and got[0].startswith("crates/a/src/big.rs: 801 lines"), got
        with open(os.path.join(d, ALLOW), "w") as f:
            f.write("# split later\ncrates/a/src/big.rs\ncrates/a/src/small.rs  # not over\n")
        got = check(d)
        assert len(got) == 1 and "small.rs is no longer over" in got[0], got
    print("lint-file-size: self-test passed")


def main():
    if "--self-test" in sys.argv[1:]:
        self_test()
        return 0
    problems = check(ROOT)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"lint-file-size: every .rs file is at most {LIMIT} lines (or listed in {ALLOW})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
