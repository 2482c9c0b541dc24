"""Files of Eddy as Python's `io` objects: `RawFile`, an `io.RawIOBase` over the native
file, wrapped by `open_file` exactly as the built-in `open` wraps a `FileIO`
(BufferedReader, BufferedWriter or BufferedRandom, then TextIOWrapper for text modes)."""

from __future__ import annotations

import io
import os
from typing import Any, Optional, Tuple

from . import _eddy


def mode_flags(mode: str) -> Tuple[int, bool, bool, bool]:
    """open(2) flags of a mode of `open` ('r', 'wb', 'a+', 'x', ...), and whether it
    reads, writes and is binary. ValueError for a mode `open` would refuse."""
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
    modes = set(mode)
    if modes - set("rwxabt+") or len(mode) > len(modes):
        raise ValueError(f"invalid mode: {mode!r}")
    kinds = [c for c in "rwxa" if c in modes]
    if len(kinds) != 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if "b" in modes and "t" in modes:
        raise ValueError("can't have text and binary mode at once")
    plus = "+" in modes
    kind = kinds[0]
    base = {"r": 0, "w": os.O_CREAT | os.O_TRUNC, "x": os.O_CREAT | os.O_EXCL,
            "a": os.O_CREAT | os.O_APPEND}[kind]
    if plus:
        access = os.O_RDWR
    elif kind == "r":
        access = os.O_RDONLY
    else:
        access = os.O_WRONLY
    reading = kind == "r" or plus
    writing = kind != "r" or plus
    return base | access, reading, writing, "b" in modes


class RawFile(io.RawIOBase):
    """An open file of Eddy as a raw binary stream: `readinto` reads straight into the
    caller's buffer (a bytearray, a memoryview, a NumPy array: no copy in between), `write`,
    `seek`, `tell`, `truncate`; it has no descriptor (`fileno` raises
    io.UnsupportedOperation). The GIL is released during every read and write."""

    def __init__(self, native: "_eddy.File", name: str, mode: str):
        super().__init__()
        self._f = native
        self.name = name
        self.mode = mode
        # The position; None in append mode: the end of the file (as FileIO, which seeks
        # there when opened for appending).
        self._pos: Optional[int] = None if native.append else 0

    def __repr__(self) -> str:
        return f"<eddy.RawFile name={self.name!r} mode={self.mode!r} closed={self.closed}>"

    def _at(self) -> int:
        if self._pos is None:
            self._pos = self._f.size()
        return self._pos

    @property
    def size_at_open(self) -> int:
        """The file's size when it was opened (no request)."""
        return self._f.size_at_open

    def readable(self) -> bool:
        self._checkClosed()
        return self._f.readable

    def writable(self) -> bool:
        self._checkClosed()
        return self._f.writable

    def seekable(self) -> bool:
        self._checkClosed()
        return True

    def isatty(self) -> bool:
        self._checkClosed()
        return False

    def fileno(self) -> int:
        raise io.UnsupportedOperation("an Eddy file has no file descriptor (fileno)")

    def readinto(self, b: Any) -> int:
        self._checkClosed()
        if not self._f.readable:
            raise io.UnsupportedOperation("File not open for reading")
        pos = self._at()
        n = self._f.readinto(b, pos)
        self._pos = pos + n
        return n

    def readall(self) -> bytes:
        self._checkClosed()
        if not self._f.readable:
            raise io.UnsupportedOperation("File not open for reading")
        pos = self._at()
        left = max(self._f.size() - pos, 0)
        buf = bytearray(left)
        got = self._f.readinto(buf, pos) if left else 0
        del buf[got:]
        self._pos = pos + got
        while True:  # the file may have grown meanwhile
            more = self._f.read(1 << 20, self._pos)
            if not more:
                return bytes(buf)
            buf += more
            self._pos += len(more)

    def write(self, b: Any) -> int:
        self._checkClosed()
        if not self._f.writable:
            raise io.UnsupportedOperation("File not open for writing")
        if self._f.append:
            n = self._f.write(b, 0)
            self._pos = None
            return n
        pos = self._at()
        n = self._f.write(b, pos)
        self._pos = pos + n
        return n

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        if not isinstance(offset, int):
            raise TypeError(f"an integer is required, not {type(offset).__name__}")
        if whence == io.SEEK_SET:
            new = offset
        elif whence == io.SEEK_CUR:
            new = self._at() + offset
        elif whence == io.SEEK_END:
            new = self._f.size() + offset
        else:
            raise ValueError(f"invalid whence ({whence}, should be 0, 1 or 2)")
        if new < 0:
            raise OSError(22, "Invalid argument: a negative position", self.name)
        self._pos = new
        return new

    def tell(self) -> int:
        self._checkClosed()
        return self._at()

    def truncate(self, size: Optional[int] = None) -> int:
        self._checkClosed()
        if size is None:
            size = self._at()
        if size < 0:
            raise OSError(22, "Invalid argument: a negative size", self.name)
        self._f.truncate(size)
        return size

    def flush(self) -> None:
        self._checkClosed()

    def fadvise(self, offset: int, length: int, advice: int) -> None:
        """How the program will read `length` bytes at `offset` (0: to the end), `advice`
        one of os.POSIX_FADV_* (as os.posix_fadvise): WILLNEED starts a background fetch of
        a linked file's range into the cache, SEQUENTIAL and RANDOM turn read-ahead on for
        every read and off."""
        self._checkClosed()
        if offset < 0 or length < 0:
            raise OSError(22, "Invalid argument: a negative offset or length", self.name)
        self._f.fadvise(offset, length, advice)

    def fsync(self) -> None:
        """Makes the data and the size durable on the daemons (as os.fsync)."""
        self._checkClosed()
        self._f.fsync()

    def close(self) -> None:
        if not self.closed:
            try:
                self._f.close()
            finally:
                super().close()


def open_file(native_open: Any, path: str, mode: str = "r", buffering: int = -1,
              encoding: Optional[str] = None, errors: Optional[str] = None,
              newline: Optional[str] = None, buffer_size: int = io.DEFAULT_BUFFER_SIZE) -> Any:
    """What the built-in `open` does, over `native_open(path, flags)`."""
    flags, reading, writing, binary = mode_flags(mode)
    if not isinstance(buffering, int):
        raise TypeError(f"buffering must be an integer, not {type(buffering).__name__}")
    if binary and (encoding is not None or errors is not None or newline is not None):
        raise ValueError("binary mode doesn't take an encoding, errors or newline argument")
    if buffering == 0 and not binary:
        raise ValueError("can't have unbuffered text I/O")
    raw_mode = mode.replace("t", "")
    raw = RawFile(native_open(path, flags), path, raw_mode if "b" in raw_mode else raw_mode + "b")
    try:
        line_buffering = False
        if buffering == 1 and not binary:
            buffering = -1
            line_buffering = True
        if buffering < 0:
            buffering = buffer_size
        if buffering == 0:
            return raw
        if reading and writing:
            buffer: Any = io.BufferedRandom(raw, buffering)
        elif writing:
            buffer = io.BufferedWriter(raw, buffering)
        else:
            buffer = io.BufferedReader(raw, buffering)
        if binary:
            return buffer
        text = io.TextIOWrapper(buffer, encoding, errors, newline, line_buffering)
        text.mode = mode  # type: ignore[misc]
        return text
    except BaseException:
        raw.close()
        raise
