#!/usr/bin/env python3
"""The two lanes of Eddy's tests, and the time each test binary takes.

  fast   every unit and property test, and the integration test binaries listed in
         scripts/fast-lane.txt (the client and the daemon against real daemons of this host):
         no root, no services (no FUSE, no Slurm, no PostgreSQL, no network namespaces).
         Tests of those binaries that need root live in a module named `needs_root`, those
         that need a server the test kit starts in one named `needs_services`; this lane
         skips them.
  root   everything else: the `needs_*` tests of those binaries, every other integration
         test binary, the doc tests. Run as root, after `cargo build --bins` and `cargo build -p eddy-preload`.

  uring  the mount's suites that exercise its FUSE transport (URING_SUITES of the eddy-fuse
         `posix` binary: pjdfstest, the fsx-style random I/O, the POSIX operations and the
         property test, locks, mixed engines) once more over FUSE io_uring: the kernel's
         `fuse.enable_uring` set to Y for the lane and restored after it (root), the test kit
         told by EDDY_TEST_FUSE_TRANSPORT=io_uring. Where the kernel lacks it, the lane fails
         with the reason; it never passes on /dev/fuse.

`make test-fast` runs the fast lane as the calling user; `make test` runs the fast lane (as
the unprivileged user EDDY_FAST_USER, default `nobody`, when it runs as root: that is the check
that the lane needs no root), then the root lane, so together they run every test once, and
then the io_uring lane.

Each binary runs with the working directory and the environment cargo gives it (the package's
directory, CARGO_MANIFEST_DIR …); integration binaries one test at a time (each brings a whole
deployment), unit binaries with cargo's default parallelism. Every binary runs even when an
earlier one failed; the lane fails at the end naming the failed ones. The time of each binary
is printed, slowest first, and written to target/test-times-<lane>.txt.
"""

import json
import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FAST_LIST = ROOT / "scripts" / "fast-lane.txt"
NEEDS = ["needs_root", "needs_services"]

# The kernel's switch for FUSE over io_uring (decision 0078).
URING_PARAMETER = Path("/sys/module/fuse/parameters/enable_uring")
# The test kit's variable naming the mounts' FUSE transport (eddy_testkit::FUSE_TRANSPORT_VAR).
TRANSPORT_VAR = "EDDY_TEST_FUSE_TRANSPORT"
# The tests of eddy-fuse's `posix` binary the io_uring lane runs (libtest name filters): those
# whose requests cross the transport in every shape (decision 0079). `io_uring::` itself runs in
# the root lane, where it sets and restores the parameter test by test.
URING_BINARY = ("eddy-fuse", "posix")
URING_SUITES = [
    "posix_suite::",
    "fsx::random_operations_through_the_mount",
    "mount_ops::",
    "mount_prop::",
    "locks::",
    "mixed_io::",
]


def fast_binaries():
    """`package:test` names of the integration binaries in the fast lane."""
    names = []
    for line in FAST_LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            if ":" not in line:
                sys.exit(f"{FAST_LIST}: `{line}` is not `package:test-binary`")
            names.append(line)
    return names


def cargo_json(args):
    """The test executables cargo builds for `args`: (package, kind, name, path, dir)."""
    cmd = ["cargo", "test", "--no-run", "--message-format=json-render-diagnostics"] + args
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        sys.exit(f"build failed: {' '.join(cmd)}")
    out = []
    for line in proc.stdout.splitlines():
        m = json.loads(line)
        if m.get("reason") != "compiler-artifact" or not m.get("executable"):
            continue
        if not m["profile"]["test"]:
            continue
        name = m["target"]["name"]
        kind = m["target"]["kind"][0]
        package = Path(m["manifest_path"]).parent.name
        out.append((package, kind, name, m["executable"], str(Path(m["manifest_path"]).parent)))
    return out


def demote(user):
    """A preexec function that becomes `user` (no groups), or None when not root."""
    if os.geteuid() != 0 or not user:
        return None, {}
    pw = pwd.getpwnam(user)

    def become():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    # A home and a temporary directory the user can write (tests make their own dirs there).
    home = Path(f"/tmp/eddy-fast-lane-{pw.pw_uid}")
    home.mkdir(mode=0o700, exist_ok=True)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    return become, {"HOME": str(home), "TMPDIR": "/tmp", "USER": user, "LOGNAME": user}


def run(binaries, lane, user=None, fast=(), only=(), env_more=None):
    """Runs each binary: in the fast lane without the `needs_*` tests; in the root lane only
    those of the binaries the fast lane runs, and the other integration binaries whole; with
    `only`, the tests those filters name (exactly, in the io_uring lane), with `env_more` in
    the environment."""
    become, env_extra = demote(user)
    if become and binaries:
        # The checkout and its target directory must be reachable by that user (as for the
        # tests that run programs as another user); say so instead of failing every binary.
        probe = subprocess.run(["test", "-x", binaries[0][3]], preexec_fn=become)
        if probe.returncode != 0:
            sys.exit(
                f"the fast lane runs as {user}, who cannot execute {binaries[0][3]}: make the "
                f"checkout's directories searchable by others (chmod o+x on each), or run "
                f"`make test FAST_USER=` to run it as yourself"
            )
    failed, times = [], []
    for package, kind, name, exe, pkg_dir in binaries:
        integration = kind == "test"
        args = [exe]
        if only:
            args += list(only)
        elif lane == "fast":
            for n in NEEDS:
                args += ["--skip", n]
        elif not integration or f"{package}:{name}" in fast:
            args += NEEDS
        if integration:
            args += ["--test-threads=1"]
        env = dict(os.environ)
        env.update(env_extra)
        env.update(env_more or {})
        env["CARGO_MANIFEST_DIR"] = pkg_dir
        env["CARGO_PKG_NAME"] = package
        label = f"{package}:{name}" + ("" if integration else f" ({kind})")
        print(f"\n=== {lane} lane: {label}", flush=True)
        t = time.monotonic()
        rc = subprocess.run(args, cwd=pkg_dir, env=env, preexec_fn=become).returncode
        took = time.monotonic() - t
        times.append((took, label))
        if rc != 0:
            failed.append(label)
    times.sort(reverse=True)
    report = [f"{t:8.1f} s  {label}" for t, label in times]
    total = sum(t for t, _ in times)
    report.append(f"{total:8.1f} s  the {lane} lane ({len(times)} binaries)")
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    target.mkdir(exist_ok=True)
    try:
        (target / f"test-times-{lane}.txt").write_text("\n".join(report) + "\n")
    except OSError:
        pass
    print(f"\nTime per test binary, {lane} lane:\n" + "\n".join(report))
    return failed


def uring_lane():
    """The io_uring lane: `fuse.enable_uring` set to Y around the run of URING_SUITES with the
    test kit's mounts on io_uring, then restored to what it was. Returns the failed binaries."""
    package, test = URING_BINARY
    bins = cargo_json(["-p", package, "--test", test])
    before = None
    try:
        before = URING_PARAMETER.read_text().strip()
        if before != "Y":
            URING_PARAMETER.write_text("Y")
        print(f"{URING_PARAMETER}: Y for this lane (was {before})", flush=True)
    except OSError as e:
        # The tests fail, each naming why (eddy_testkit::require::fuse_io_uring).
        print(f"cannot set {URING_PARAMETER} to Y ({e}): the io_uring tests fail", flush=True)
    try:
        return run(bins, "uring", only=URING_SUITES, env_more={TRANSPORT_VAR: "io_uring"})
    finally:
        if before is not None and before != "Y":
            try:
                URING_PARAMETER.write_text(before)
            except OSError as e:
                print(f"cannot restore {URING_PARAMETER} to {before}: {e}", flush=True)


def main():
    if len(sys.argv) < 2 or sys.argv[1] not in ("fast", "root", "uring"):
        sys.exit("usage: test-lanes.py fast [--as USER] | root | uring")
    lane = sys.argv[1]
    user = None
    if "--as" in sys.argv:
        rest = sys.argv[sys.argv.index("--as") + 1 :]
        user = rest[0] if rest else None  # `--as` with no user: as the caller
    fast = fast_binaries()
    if lane == "uring":
        failed = uring_lane()
    elif lane == "fast":
        bins = cargo_json(["--workspace", "--lib", "--bins"])
        for entry in fast:
            package, test = entry.split(":")
            bins += cargo_json(["-p", package, "--test", test])
        listed = {f"{p}:{n}" for p, k, n, _, _ in bins if k == "test"}
        for entry in fast:
            if entry not in listed:
                sys.exit(f"{FAST_LIST}: no test binary {entry}")
        failed = run(bins, lane, user)
    else:
        bins = cargo_json(["--workspace", "--lib", "--bins", "--tests"])
        failed = run(bins, lane, fast=set(fast))
        print("\n=== root lane: doc tests", flush=True)
        if subprocess.run(["cargo", "test", "--workspace", "--doc"], cwd=ROOT).returncode:
            failed.append("doc tests")
    if failed:
        print(f"\nFAILED in the {lane} lane: " + ", ".join(failed))
        sys.exit(1)
    print(f"\nThe {lane} lane passed.")


if __name__ == "__main__":
    main()
