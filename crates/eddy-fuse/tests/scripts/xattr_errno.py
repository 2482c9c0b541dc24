"""Extended-attribute error cases on a mounted Eddy, checked errno by errno.

usage: xattr_errno.py root DIR   (as root: DIR holds f, a symlink l and a FIFO p)
       xattr_errno.py user DIR   (as an unprivileged user: DIR holds ro (0644, root's),
                                  secret (0600, root's) and mine (0644, the user's))
Prints one line per check and exits non-zero at the first failure.
"""
import ctypes
import errno
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
libc.getxattr.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
libc.getxattr.restype = ctypes.c_ssize_t
libc.listxattr.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t]
libc.listxattr.restype = ctypes.c_ssize_t


def expect(what, code, fn, *args, **kw):
    try:
        fn(*args, **kw)
    except OSError as e:
        if e.errno == code:
            print(f"{what}: {errno.errorcode[code]} as expected")
            return
        sys.exit(f"{what}: expected {errno.errorcode[code]}, got {e!r}")
    sys.exit(f"{what}: expected {errno.errorcode[code]}, but it succeeded")


def check(what, cond, detail=""):
    if not cond:
        sys.exit(f"{what}: failed {detail}")
    print(f"{what}: ok")


def raw_getxattr(path, name, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    n = libc.getxattr(path.encode(), name.encode(), buf if size else None, size)
    return n, ctypes.get_errno(), buf.raw[: max(n, 0)]


def raw_listxattr(path, size):
    buf = ctypes.create_string_buffer(max(size, 1))
    n = libc.listxattr(path.encode(), buf if size else None, size)
    return n, ctypes.get_errno(), buf.raw[: max(n, 0)]


def as_root(d):
    f, l, p = (os.path.join(d, n) for n in ("f", "l", "p"))
    os.setxattr(f, "user.color", b"blue")
    check("get", os.getxattr(f, "user.color") == b"blue")
    expect("XATTR_CREATE on an existing name", errno.EEXIST,
           os.setxattr, f, "user.color", b"red", os.XATTR_CREATE)
    expect("XATTR_REPLACE on a missing name", errno.ENODATA,
           os.setxattr, f, "user.none", b"x", os.XATTR_REPLACE)
    os.setxattr(f, "user.color", b"green", os.XATTR_REPLACE)
    os.setxattr(f, "user.new", b"", os.XATTR_CREATE)
    check("replace and empty value",
          os.getxattr(f, "user.color") == b"green" and os.getxattr(f, "user.new") == b"")
    binary = bytes(range(256)) * 4
    os.setxattr(f, "user.bin", binary)
    check("binary value", os.getxattr(f, "user.bin") == binary)
    n, _, _ = raw_getxattr(f, "user.bin", 0)
    check("getxattr with size 0 gives the size", n == len(binary), f"({n})")
    n, e, _ = raw_getxattr(f, "user.bin", 10)
    check("getxattr into a small buffer is ERANGE", n == -1 and e == errno.ERANGE, f"({n}, {e})")
    want = b"user.bin\0user.color\0user.new\0"
    n, _, _ = raw_listxattr(f, 0)
    check("listxattr with size 0 gives the size", n == len(want), f"({n})")
    n, e, got = raw_listxattr(f, len(want))
    check("listxattr lists every name", got == want, f"({got!r})")
    n, e, _ = raw_listxattr(f, 5)
    check("listxattr into a small buffer is ERANGE", n == -1 and e == errno.ERANGE, f"({n}, {e})")
    expect("missing name", errno.ENODATA, os.getxattr, f, "user.missing")
    expect("remove a missing name", errno.ENODATA, os.removexattr, f, "user.missing")
    expect("name of 256 bytes", errno.ERANGE, os.setxattr, f, "user." + "n" * 251, b"x")
    os.setxattr(f, "user." + "n" * 250, b"x")
    check("name of 255 bytes", os.getxattr(f, "user." + "n" * 250) == b"x")
    os.removexattr(f, "user." + "n" * 250)
    expect("value over 64 KiB", errno.E2BIG, os.setxattr, f, "user.big", b"v" * (65536 + 1))
    os.setxattr(f, "user.big", b"v" * 65536)
    check("value of 64 KiB", len(os.getxattr(f, "user.big")) == 65536)
    os.removexattr(f, "user.big")
    expect("POSIX ACL", errno.EOPNOTSUPP, os.getxattr, f, "system.posix_acl_access")
    expect("unknown namespace", errno.EOPNOTSUPP, os.setxattr, f, "other.x", b"x")
    expect("user.* on a symlink", errno.EPERM,
           os.setxattr, l, "user.x", b"x", follow_symlinks=False)
    expect("user.* on a FIFO", errno.EPERM, os.setxattr, p, "user.x", b"x")
    os.setxattr(f, "trusted.t", b"root only")
    os.setxattr(f, "security.s", b"sec")
    os.setxattr(p, "trusted.t", b"on a fifo")
    check("trusted.* and security.* for root",
          os.getxattr(f, "trusted.t") == b"root only" and os.getxattr(p, "trusted.t") == b"on a fifo")
    check("root lists trusted.*", "trusted.t" in os.listxattr(f))
    os.removexattr(f, "user.new")
    check("remove", "user.new" not in os.listxattr(f))
    expect("a missing file", errno.ENOENT, os.getxattr, os.path.join(d, "nothing"), "user.x")


def as_user(d):
    ro, secret, mine = (os.path.join(d, n) for n in ("ro", "secret", "mine"))
    check("not root", os.geteuid() != 0)
    check("get with read permission", os.getxattr(ro, "user.a") == b"1")
    check("trusted.* left out of listings", os.listxattr(ro) == ["security.s", "user.a"],
          f"({os.listxattr(ro)})")
    expect("get trusted.* (hidden, as on Linux)", errno.ENODATA, os.getxattr, ro, "trusted.t")
    expect("set trusted.*", errno.EPERM, os.setxattr, mine, "trusted.t", b"x")
    expect("set security.*", errno.EPERM, os.setxattr, mine, "security.s", b"x")
    expect("set without write permission", errno.EACCES, os.setxattr, ro, "user.b", b"x")
    expect("remove without write permission", errno.EACCES, os.removexattr, ro, "user.a")
    expect("get without read permission", errno.EACCES, os.getxattr, secret, "user.a")
    # As on Linux (ext4, XFS): names are listed without read permission.
    check("list without read permission", os.listxattr(secret) == ["user.a"])
    os.setxattr(mine, "user.mine", b"yes")
    check("set on one's own file", os.getxattr(mine, "user.mine") == b"yes")
    os.removexattr(mine, "user.mine")
    check("remove on one's own file", os.listxattr(mine) == [])


{"root": as_root, "user": as_user}[sys.argv[1]](sys.argv[2])
print("all checks passed")
