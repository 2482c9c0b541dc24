"""The os-like calls: listdir, scandir, stat, makedirs, remove, rename, walk."""

import errno
import os
import stat
import time

import pytest


def touch(client, path, data=b""):
    with client.open(path, "wb") as f:
        f.write(data)


def test_stat_is_an_os_stat_result(client, d):
    before = time.time()
    touch(client, d + "/f", b"12345")
    st = client.stat(d + "/f")
    assert isinstance(st, os.stat_result)
    assert stat.S_ISREG(st.st_mode) and st.st_size == 5 and st.st_nlink == 1
    assert st.st_uid == os.getuid()
    assert before - 5 <= st.st_mtime <= time.time() + 5
    assert st.st_mtime_ns // 10**9 == int(st.st_mtime) == st[stat.ST_MTIME]
    assert stat.S_ISDIR(client.stat(d).st_mode)


def test_listdir_and_scandir(client, d):
    client.mkdir(d + "/sub")
    for n in ["b", "a", "c"]:
        touch(client, f"{d}/{n}", n.encode() * 3)
    assert sorted(client.listdir(d)) == ["a", "b", "c", "sub"]
    with client.scandir(d) as it:
        entries = {e.name: e for e in it}
    assert entries["sub"].is_dir() and not entries["sub"].is_file()
    assert entries["a"].is_file() and entries["a"].stat().st_size == 3
    assert entries["a"].path == d + "/a" and os.fspath(entries["a"]) == d + "/a"
    assert entries["a"].inode() == client.stat(d + "/a").st_ino


def test_a_directory_of_many_entries_is_listed_whole(client, d):
    names = {f"e{i:05d}" for i in range(700)}  # several readdir pages
    for n in names:
        client.mkdir(f"{d}/{n}")
    assert set(client.listdir(d)) == names


def test_makedirs_remove_rename_walk(client, d):
    client.makedirs(d + "/x/y/z")
    with pytest.raises(FileExistsError):
        client.makedirs(d + "/x/y/z")
    client.makedirs(d + "/x/y/z", exist_ok=True)
    touch(client, d + "/x/y/z/f1")
    touch(client, d + "/x/f2")
    walked = list(client.walk(d))
    assert walked == [
        (d, ["x"], []),
        (d + "/x", ["y"], ["f2"]),
        (d + "/x/y", ["z"], []),
        (d + "/x/y/z", [], ["f1"]),
    ]
    bottom_up = [w[0] for w in client.walk(d, topdown=False)]
    assert bottom_up == [d + "/x/y/z", d + "/x/y", d + "/x", d]
    client.rename(d + "/x/f2", d + "/x/f3")
    assert client.listdir(d + "/x") == ["f3", "y"]
    client.rename(d + "/x/y", d + "/moved")
    assert client.listdir(d + "/moved/z") == ["f1"]
    client.remove(d + "/moved/z/f1")
    assert client.listdir(d + "/moved/z") == []
    client.rmdir(d + "/moved/z")
    assert not client.exists(d + "/moved/z")


def test_errors_are_the_os_module_exceptions_with_their_errno(client, d):
    touch(client, d + "/f")
    client.mkdir(d + "/dir")
    touch(client, d + "/dir/g")
    cases = [
        (lambda: client.stat(d + "/missing"), FileNotFoundError, errno.ENOENT),
        (lambda: client.open(d + "/missing"), FileNotFoundError, errno.ENOENT),
        (lambda: client.mkdir(d + "/f"), FileExistsError, errno.EEXIST),
        (lambda: client.rmdir(d + "/dir"), OSError, errno.ENOTEMPTY),
        (lambda: client.listdir(d + "/f"), NotADirectoryError, errno.ENOTDIR),
        (lambda: client.open(d + "/dir", "wb"), IsADirectoryError, errno.EISDIR),
        (lambda: client.remove(d + "/missing"), FileNotFoundError, errno.ENOENT),
    ]
    for call, exc, no in cases:
        with pytest.raises(exc) as e:
            call()
        assert e.value.errno == no, e.value
        assert e.value.filename and e.value.filename.startswith(d)
