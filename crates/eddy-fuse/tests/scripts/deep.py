#!/usr/bin/env python3
"""Paths of any depth, for tests/posix/deep_paths.rs.

Usage: deep.py DIR LEVELS [BEYOND]. Builds in DIR (made by the caller) a chain of LEVELS
directories of 200-byte names by mkdir + chdir with relative names only, then in the deepest
one runs every namespace operation with relative names and relative to a directory
descriptor, printing what each one gives (results, never times or absolute paths), so that
the output on a local file system and on Eddy can be compared line by line. With BEYOND, it
goes on nesting until a mkdir fails or BEYOND levels more were made, and prints how far it got
and the errno.
"""
import ctypes
import errno
import os
import stat
import sys

base, levels = sys.argv[1], int(sys.argv[2])
beyond = int(sys.argv[3]) if len(sys.argv) > 3 else 0
NAME = "d" * 200


def show(what, f, *a, **k):
    try:
        r = f(*a, **k)
        print(what, "ok", "" if r is None else r)
    except OSError as e:
        print(what, errno.errorcode.get(e.errno, e.errno))


def desc(name, **k):
    s = os.lstat(name, **k)
    kind = stat.S_IFMT(s.st_mode)
    size = s.st_size if stat.S_ISREG(s.st_mode) else "-"
    return f"kind={kind:o} mode={stat.S_IMODE(s.st_mode):o} size={size} nlink={s.st_nlink} uid={s.st_uid}"


os.chdir(base)
for i in range(levels):
    os.mkdir(NAME)
    os.chdir(NAME)
print("depth", len(os.getcwd()) - len(base))

# getcwd as the C library answers it: the whole path, ERANGE for a buffer too small.
libc = ctypes.CDLL(None, use_errno=True)
libc.getcwd.restype = ctypes.c_char_p
small = ctypes.create_string_buffer(4096)
r = libc.getcwd(small, 4096)
print("getcwd-4096", "ok" if r else errno.errorcode.get(ctypes.get_errno()))
big = ctypes.create_string_buffer(64 * 1024)
r = libc.getcwd(big, 64 * 1024)
print("getcwd-64k", "ok" if r else errno.errorcode.get(ctypes.get_errno()), r is not None and len(r) - len(base))
libc.realpath.restype = ctypes.c_char_p
r = libc.realpath(b".", None)
print("realpath-allocated", "ok" if r else errno.errorcode.get(ctypes.get_errno()), r is not None and len(r) - len(base))
r = libc.realpath(b".", ctypes.create_string_buffer(4096))
print("realpath-buffer", "ok" if r else errno.errorcode.get(ctypes.get_errno()))


def create(name, data):
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, data)
    os.close(fd)


def read(name, **k):
    fd = os.open(name, os.O_RDONLY, **k)
    data = os.read(fd, 100)
    os.close(fd)
    return data.decode()


show("create", create, "f", b"hello")
show("read", read, "f")
show("mkdir", os.mkdir, "sub", 0o755)
show("mknod", os.mknod, "n", stat.S_IFIFO | 0o640)
show("mkfifo", os.mkfifo, "p", 0o600)
show("symlink", os.symlink, "f", "l")
show("readlink", os.readlink, "l")
show("link", os.link, "f", "h")
show("rename", os.rename, "h", "h2")
show("rename-dir", os.rename, "sub", "sub2")
show("chmod", os.chmod, "f", 0o600)
show("chown", os.chown, "f", 65534, 65534)
show("truncate", os.truncate, "f", 2)
show("read-truncated", read, "f")
for n in ["f", "h2", "l", "n", "p", "sub2"]:
    show("stat " + n, desc, n)
show("listdir", lambda: " ".join(sorted(os.listdir("."))))
show("unlink", os.unlink, "h2")
show("unlink-gone", os.unlink, "h2")
show("rmdir", os.rmdir, "sub2")
show("utime", os.utime, "f", (1000000000, 1000000000))
show("mtime", lambda: os.stat("f").st_mtime_ns)

# The *at calls, relative to a descriptor of the deepest directory, from the top.
d = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
os.chdir(base)
show("at-mkdir", os.mkdir, "x", 0o700, dir_fd=d)
show("at-create", lambda: os.close(os.open("x/g", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=d)))
show("at-rename", os.rename, "x", "y", src_dir_fd=d, dst_dir_fd=d)
show("at-stat", desc, "y/g", dir_fd=d)
show("at-read", read, "f", dir_fd=d)
show("at-symlink", os.symlink, "y", "ly", dir_fd=d)
show("at-link", os.link, "f", "y/f2", src_dir_fd=d, dst_dir_fd=d)
show("at-mknod", os.mknod, "y/q", stat.S_IFIFO | 0o600, dir_fd=d)
show("at-chmod", os.chmod, "y", 0o755, dir_fd=d)
show("at-unlink", os.unlink, "y/g", dir_fd=d)
show("at-unlink2", os.unlink, "y/f2", dir_fd=d)
show("at-unlink3", os.unlink, "y/q", dir_fd=d)
show("at-rmdir", os.rmdir, "y", dir_fd=d)
show("at-listdir", lambda: " ".join(sorted(os.listdir(d))))
os.fchdir(d)
print("fchdir-depth", len(os.getcwd()) - len(base))
os.close(d)

if beyond:
    made = 0
    while made < beyond:
        try:
            os.mkdir(NAME)
        except OSError as e:
            print("beyond", made, errno.errorcode.get(e.errno, e.errno))
            break
        os.chdir(NAME)
        made += 1
    else:
        print("beyond", made, "no-error")
