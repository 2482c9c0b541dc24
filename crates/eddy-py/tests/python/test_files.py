"""Files as io objects: the classes the built-in open returns, modes, positions, buffers."""

import errno
import io
import os
import threading

import numpy as np
import pytest


def pattern(n, seed=1):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def test_open_returns_the_io_objects_of_the_builtin_open(client, d):
    kinds = {
        "rb": io.BufferedReader,
        "wb": io.BufferedWriter,
        "ab": io.BufferedWriter,
        "r+b": io.BufferedRandom,
        "w+b": io.BufferedRandom,
        "r": io.TextIOWrapper,
        "w": io.TextIOWrapper,
        "a+": io.TextIOWrapper,
    }
    with client.open(d + "/f", "wb") as f:
        f.write(b"x")
    for mode, cls in kinds.items():
        with client.open(d + "/f", mode) as f:
            assert type(f) is cls, mode
            raw = f.buffer.raw if isinstance(f, io.TextIOWrapper) else f.raw
            assert isinstance(raw, io.RawIOBase)
    with client.open(d + "/f", "rb", buffering=0) as f:
        assert isinstance(f, io.RawIOBase) and f.readable() and not f.writable()


def test_bytes_across_chunks_and_daemons_read_back(client, d):
    data = pattern(1_000_003)  # 15+ chunks of 64 KiB
    with client.open(d + "/big", "wb") as f:
        assert f.write(data) == len(data)
    assert client.stat(d + "/big").st_size == len(data)
    with client.open(d + "/big", "rb") as f:
        assert f.read() == data
    with client.open(d + "/big", "rb") as f:
        f.seek(654_321)
        assert f.read(100_000) == data[654_321:754_321]
        assert f.tell() == 754_321
        f.seek(-10, io.SEEK_END)
        assert f.read() == data[-10:]


def test_readinto_fills_a_numpy_array_in_place(client, d):
    data = pattern(300_000, seed=2)
    with client.open(d + "/n", "wb") as f:
        f.write(data)
    arr = np.zeros(400_000, dtype=np.uint8)
    view = arr[50_000:350_000]  # a view: the bytes must land in arr itself
    with client.open(d + "/n", "rb", buffering=0) as f:
        assert f.readinto(view) == 300_000
    assert arr[50_000:350_000].tobytes() == data
    assert not arr[:50_000].any() and not arr[350_000:].any()
    # Through the buffered reader, into a 2-D float array and a bytearray.
    floats = np.empty((10, 3750), dtype=np.float64)
    with client.open(d + "/n", "rb") as f:
        assert f.readinto(floats) == 300_000
    assert floats.tobytes() == data
    b = bytearray(10)
    with client.open(d + "/n", "rb") as f:
        f.seek(7)
        assert f.readinto(b) == 10
    assert bytes(b) == data[7:17]


def test_writes_take_any_buffer(client, d):
    arr = np.arange(10_000, dtype=np.int32)
    with client.open(d + "/w", "wb") as f:
        f.write(arr)
        f.write(memoryview(b"tail"))
        f.write(bytearray(b"!"))
    with client.open(d + "/w", "rb") as f:
        got = f.read()
    assert got == arr.tobytes() + b"tail!"


def test_text_mode_encodes_and_splits_lines(client, d):
    lines = ["première ligne\n", "second\n", "ünïcödé ✓\n"] * 1000
    with client.open(d + "/t.txt", "w", encoding="utf-8") as f:
        f.writelines(lines)
    with client.open(d + "/t.txt", encoding="utf-8") as f:
        assert f.readlines() == lines
    with client.open(d + "/t.txt", "rb") as f:
        assert f.read() == "".join(lines).encode()


def test_append_exclusive_update_and_truncate(client, d):
    p = d + "/a"
    with client.open(p, "x") as f:
        f.write("one\n")
    with pytest.raises(FileExistsError):
        client.open(p, "x")
    with client.open(p, "a") as f:
        f.write("two\n")
    with client.open(p, "ab") as f:
        assert f.tell() == 8
        f.write(b"three\n")
        assert f.tell() == 14
    with client.open(p) as f:
        assert f.read() == "one\ntwo\nthree\n"
    with client.open(p, "r+b") as f:
        f.seek(4)
        f.write(b"TWO")
        f.truncate(10)
        assert f.tell() == 7
    with client.open(p, "rb") as f:
        assert f.read() == b"one\nTWO\nth"
    with client.open(p, "w") as f:
        pass
    assert client.stat(p).st_size == 0


def test_fileno_is_not_supported_and_a_closed_file_raises(client, d):
    f = client.open(d + "/c", "wb", buffering=0)
    with pytest.raises(io.UnsupportedOperation):
        f.fileno()
    assert not f.isatty() and f.seekable()
    f.close()
    f.close()  # twice is fine, as for every io object
    assert f.closed
    with pytest.raises(ValueError):
        f.write(b"x")
    with pytest.raises(ValueError):
        f.read()
    g = client.open(d + "/c", "rb")
    g.close()
    with pytest.raises(ValueError):
        g.read()
    with pytest.raises(io.UnsupportedOperation):
        with client.open(d + "/c", "rb") as h:
            h.write(b"x")


def test_threads_use_one_client_at_once(client, d):
    """Calls release the GIL: eight threads write and read files at once through one
    connection, and each gets its own bytes back."""
    errors = []

    def work(i):
        try:
            data = pattern(200_000 + i, seed=10 + i)
            with client.open(f"{d}/th{i}", "wb") as f:
                f.write(data)
            buf = np.empty(len(data), dtype=np.uint8)
            with client.open(f"{d}/th{i}", "rb") as f:
                assert f.readinto(buf) == len(data)
            assert buf.tobytes() == data
        except Exception as e:  # reported below
            errors.append((i, e))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert sorted(client.listdir(d)) == sorted(f"th{i}" for i in range(8))


def test_fsync_and_a_file_dropped_open_keeps_its_bytes(client, d):
    f = client.open(d + "/s", "wb", buffering=0)
    f.write(b"durable")
    f.fsync()
    del f  # closed by the collector
    with client.open(d + "/s", "rb") as g:
        assert g.read() == b"durable"


def test_fadvise_takes_the_os_module_advice(client, d):
    with client.open(d + "/adv", "wb", buffering=0) as f:
        f.write(b"x" * 100_000)
    with client.open(d + "/adv", "rb", buffering=0) as f:
        for advice in (os.POSIX_FADV_WILLNEED, os.POSIX_FADV_SEQUENTIAL, os.POSIX_FADV_RANDOM,
                       os.POSIX_FADV_DONTNEED, os.POSIX_FADV_NOREUSE, os.POSIX_FADV_NORMAL):
            f.fadvise(0, 0, advice)
        assert f.read() == b"x" * 100_000
        with pytest.raises(OSError) as e:
            f.fadvise(0, 0, 77)
        assert e.value.errno == errno.EINVAL
        with pytest.raises(OSError) as e:
            f.fadvise(-1, 0, os.POSIX_FADV_WILLNEED)
        assert e.value.errno == errno.EINVAL
    with pytest.raises(ValueError):
        f.fadvise(0, 0, os.POSIX_FADV_WILLNEED)
