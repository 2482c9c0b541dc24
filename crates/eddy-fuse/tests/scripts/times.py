#!/usr/bin/env python3
"""Which timestamps each operation changes, for tests/posix/times.rs.

Usage: times.py DIR. In DIR (empty, made by the caller) every case gets a directory of its
own with the files it needs; all their times are set an hour into the past, then after one
sleep (so that a ctime set "now" differs from the setup's) every operation runs and every
object is stat'ed again. Prints one line per case and object: `case object atime mtime ctime`,
each field `same` or `new`. The caller compares the lines of a reference directory (a local
file system) with those of Eddy, never the times themselves.
"""
import os
import sys
import time

base = sys.argv[1]
PAST = time.time() - 3600


def w(path, data=b"data"):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.write(fd, data)
    os.close(fd)


def open_close(path, flags):
    os.close(os.open(path, flags))


def write(path):
    fd = os.open(path, os.O_WRONLY)
    os.write(fd, b"more")
    os.close(fd)


def ftruncate(path, size):
    fd = os.open(path, os.O_WRONLY)
    os.ftruncate(fd, size)
    os.close(fd)


def create(path):
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))


# name: (setup files: {relative path: data or "dir"}, operation on (case dir), objects to
# compare afterwards: relative paths, "." for the case directory itself).
CASES = {
    "open_trunc": ({"f": b"data"}, lambda d: open_close(f"{d}/f", os.O_WRONLY | os.O_TRUNC), ["f", "."]),
    "open_trunc_empty": ({"f": b""}, lambda d: open_close(f"{d}/f", os.O_WRONLY | os.O_TRUNC), ["f", "."]),
    "open_rdwr_trunc": ({"f": b"data"}, lambda d: open_close(f"{d}/f", os.O_RDWR | os.O_TRUNC), ["f", "."]),
    "open_write_no_trunc": ({"f": b"data"}, lambda d: open_close(f"{d}/f", os.O_WRONLY), ["f", "."]),
    "open_creat_existing": ({"f": b"data"}, lambda d: open_close(f"{d}/f", os.O_WRONLY | os.O_CREAT), ["f", "."]),
    "create": ({}, lambda d: create(f"{d}/new"), ["."]),
    "truncate_shrink": ({"f": b"data"}, lambda d: os.truncate(f"{d}/f", 1), ["f", "."]),
    "truncate_grow": ({"f": b"data"}, lambda d: os.truncate(f"{d}/f", 100), ["f", "."]),
    "truncate_same_size": ({"f": b"data"}, lambda d: os.truncate(f"{d}/f", 4), ["f", "."]),
    "ftruncate_shrink": ({"f": b"data"}, lambda d: ftruncate(f"{d}/f", 2), ["f", "."]),
    "ftruncate_same_size": ({"f": b"data"}, lambda d: ftruncate(f"{d}/f", 4), ["f", "."]),
    "write": ({"f": b"data"}, lambda d: write(f"{d}/f"), ["f", "."]),
    "link": ({"f": b"data"}, lambda d: os.link(f"{d}/f", f"{d}/g"), ["f", "."]),
    "unlink_one_of_two_names": ({"f": b"data"}, lambda d: os.unlink(f"{d}/g"), ["f", "."]),
    "unlink": ({"f": b"data"}, lambda d: os.unlink(f"{d}/f"), ["."]),
    "rename_in_dir": ({"f": b"data"}, lambda d: os.rename(f"{d}/f", f"{d}/g"), ["g", "."]),
    "rename_over": ({"f": b"data", "g": b"old"}, lambda d: os.rename(f"{d}/f", f"{d}/g"), ["g", "."]),
    "rename_across": ({"a": "dir", "b": "dir", "a/f": b"data"}, lambda d: os.rename(f"{d}/a/f", f"{d}/b/f"), ["b/f", "a", "b"]),
    "rename_dir_across": ({"a": "dir", "b": "dir", "a/s": "dir"}, lambda d: os.rename(f"{d}/a/s", f"{d}/b/s"), ["b/s", "a", "b"]),
    "mkdir": ({}, lambda d: os.mkdir(f"{d}/s"), ["."]),
    "rmdir": ({"s": "dir"}, lambda d: os.rmdir(f"{d}/s"), ["."]),
    "mkfifo": ({}, lambda d: os.mkfifo(f"{d}/p"), ["."]),
    "symlink": ({}, lambda d: os.symlink("target", f"{d}/l"), ["."]),
    "chmod": ({"f": b"data"}, lambda d: os.chmod(f"{d}/f", 0o600), ["f", "."]),
    "chown_same": ({"f": b"data"}, lambda d: os.chown(f"{d}/f", os.getuid(), os.getgid()), ["f", "."]),
    "chmod_dir": ({"s": "dir"}, lambda d: os.chmod(f"{d}/s", 0o700), ["s", "."]),
    "setxattr": ({"f": b"data"}, lambda d: os.setxattr(f"{d}/f", "user.k", b"v"), ["f", "."]),
    "removexattr": ({"f": b"data"}, lambda d: os.removexattr(f"{d}/f", "user.k"), ["f", "."]),
    "utimes_given": ({"f": b"data"}, lambda d: os.utime(f"{d}/f", (PAST + 10, PAST + 20)), ["f", "."]),
    "utimes_now": ({"f": b"data"}, lambda d: os.utime(f"{d}/f", None), ["f", "."]),
}


def setup(name, files):
    d = f"{base}/{name}"
    os.mkdir(d)
    for rel, data in files.items():
        if data == "dir":
            os.mkdir(f"{d}/{rel}")
        else:
            w(f"{d}/{rel}", data)
    if name == "unlink_one_of_two_names":
        os.link(f"{d}/f", f"{d}/g")
    if name == "removexattr":
        os.setxattr(f"{d}/f", "user.k", b"v")
    # Deepest first, the case directory last (setting a child's times changes nothing above).
    for rel in sorted(files, key=len, reverse=True) + (["g"] if name == "unlink_one_of_two_names" else []):
        os.utime(f"{d}/{rel}", (PAST, PAST))
    os.utime(d, (PAST, PAST))


for name, (files, _, _) in CASES.items():
    setup(name, files)
# A rename's target is compared with its source's times before the rename.
SOURCE = {("rename_in_dir", "g"): "f", ("rename_across", "b/f"): "a/f", ("rename_dir_across", "b/s"): "a/s"}
before = {}
for name, (_, _, objs) in CASES.items():
    for o in objs + [s for (n, _), s in SOURCE.items() if n == name]:
        p = f"{base}/{name}/{o}"
        if os.path.lexists(p):
            before[(name, o)] = os.lstat(p)
time.sleep(1.1)
for name, (_, op, _) in CASES.items():
    op(f"{base}/{name}")
for name, (_, _, objs) in CASES.items():
    for o in objs:
        p = f"{base}/{name}/{o}"
        after = os.lstat(p)
        prev = before.get((name, o))
        if (name, o) in SOURCE:
            prev = before.get((name, SOURCE[(name, o)]))
        if prev is None:
            print(f"{name} {o} missing-before")
            continue
        fields = [
            "same" if getattr(after, f) == getattr(prev, f) else "new"
            for f in ("st_atime_ns", "st_mtime_ns", "st_ctime_ns")
        ]
        print(name, o, *fields)
