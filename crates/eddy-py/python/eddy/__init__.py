"""Eddy, the burst-buffer file system, from Python without a mount (decision 0067).

    import eddy
    fs = eddy.connect()                     # the deployment of EDDY_STATE
    with fs.open("/data/x.bin", "wb") as f:
        f.write(b"...")
    fs.listdir("/data"); fs.stat("/data/x.bin").st_size

`Client.open` returns the `io` objects the built-in `open` returns (a `RawFile` under
BufferedReader / BufferedWriter / BufferedRandom, under TextIOWrapper for text), and
`readinto` fills a bytearray or a NumPy array with no copy in between. The namespace calls
follow the `os` module's (`listdir`, `scandir`, `stat`, `makedirs`, `remove`, `rename`,
`walk`, ...), raise the same `OSError` subclasses, and release the GIL while they wait.
`eddy.fsspec.EddyFileSystem` is the `eddy://` file system (pandas, zarr, xarray);
`eddy.stats()` and `eddy.history` are `eddy stats --json` and `eddy history` as dicts.
"""

from __future__ import annotations

import io
import json
import os
import stat as _stat
from typing import Any, Callable, Iterator, List, Optional, Tuple, Union

from . import _eddy
from ._io import RawFile, mode_flags
from ._io import open_file as _open_file
from ._records import Record, Records, stats_rows

__version__: str = _eddy.__version__

PathLike = Union[str, "os.PathLike[str]"]


def _path(p: Any) -> str:
    """A namespace path from a str or an os.PathLike (TypeError for anything else)."""
    p = os.fspath(p)
    if isinstance(p, bytes):
        raise TypeError("an Eddy path is a str (or os.PathLike of str), not bytes")
    return p


def _stat_result(t: Tuple[int, ...]) -> os.stat_result:
    mode, ino, dev, nlink, uid, gid, size, at, mt, ct, blocks, rdev = t
    extra = {
        "st_atime": at / 1e9, "st_mtime": mt / 1e9, "st_ctime": ct / 1e9,
        "st_atime_ns": at, "st_mtime_ns": mt, "st_ctime_ns": ct,
        "st_blocks": blocks, "st_blksize": 4096, "st_rdev": rdev,
    }
    seq = (mode, ino, dev, nlink, uid, gid, size, at // 10**9, mt // 10**9, ct // 10**9)
    return os.stat_result(seq, extra)


class DirEntry:
    """An entry of `Client.scandir`, as `os.DirEntry`: its attributes came with the listing
    (no request), but a symbolic link's target is looked up when followed."""

    __slots__ = ("name", "path", "_st", "_client")

    def __init__(self, client: "Client", parent: str, name: str, st: os.stat_result):
        self.name = name
        self.path = parent.rstrip("/") + "/" + name
        self._st = st
        self._client = client

    def __repr__(self) -> str:
        return f"<eddy.DirEntry {self.name!r}>"

    def __fspath__(self) -> str:
        return self.path

    def inode(self) -> int:
        return self._st.st_ino

    def is_symlink(self) -> bool:
        return _stat.S_ISLNK(self._st.st_mode)

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        if follow_symlinks and self.is_symlink():
            return self._client.stat(self.path)
        return self._st

    def _target_mode(self, follow_symlinks: bool) -> int:
        try:
            return self.stat(follow_symlinks=follow_symlinks).st_mode
        except FileNotFoundError:
            return 0

    def is_dir(self, *, follow_symlinks: bool = True) -> bool:
        return _stat.S_ISDIR(self._target_mode(follow_symlinks))

    def is_file(self, *, follow_symlinks: bool = True) -> bool:
        return _stat.S_ISREG(self._target_mode(follow_symlinks))


class _Scandir:
    """The iterator `scandir` returns; a context manager, as os.scandir's."""

    def __init__(self, entries: List[DirEntry]):
        self._it = iter(entries)

    def __iter__(self) -> "_Scandir":
        return self

    def __next__(self) -> DirEntry:
        return next(self._it)

    def __enter__(self) -> "_Scandir":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._it = iter(())


class Client:
    """A connection to an Eddy deployment: `Client(state=DIR)` for the deployment whose
    state directory is DIR (the --state of `eddy start`), `Client()` or `eddy.connect()`
    for EDDY_STATE's. Its methods may be called from several threads at once."""

    def __init__(self, state: Optional[PathLike] = None):
        self._c = _eddy.Client(None if state is None else _path(state))
        chunk = self._c.chunk_size
        # Buffered files move a chunk at a time (at least io's default).
        self._buffer_size = max(io.DEFAULT_BUFFER_SIZE, min(chunk, 4 << 20))

    def __repr__(self) -> str:
        return f"<eddy.Client state={self._c.state!r}>"

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    @property
    def chunk_size(self) -> int:
        return self._c.chunk_size

    # ---------------------------------------------------------------- files

    def open(self, path: PathLike, mode: str = "r", buffering: int = -1,
             encoding: Optional[str] = None, errors: Optional[str] = None,
             newline: Optional[str] = None) -> Any:
        """Opens a file of the namespace as the built-in `open` does (same modes, same
        objects); new files get mode 0o666 (no umask applied)."""
        return _open_file(lambda p, flags: self._c.open(p, flags, 0o666), _path(path), mode,
                          buffering, encoding, errors, newline, self._buffer_size)

    # ---------------------------------------------------------------- namespace

    def stat(self, path: PathLike, *, follow_symlinks: bool = True) -> os.stat_result:
        """The attributes of `path`, as os.stat."""
        return _stat_result(self._c.stat(_path(path), follow_symlinks))

    def lstat(self, path: PathLike) -> os.stat_result:
        return self.stat(path, follow_symlinks=False)

    def exists(self, path: PathLike) -> bool:
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def isdir(self, path: PathLike) -> bool:
        try:
            return _stat.S_ISDIR(self.stat(path).st_mode)
        except FileNotFoundError:
            return False

    def isfile(self, path: PathLike) -> bool:
        try:
            return _stat.S_ISREG(self.stat(path).st_mode)
        except FileNotFoundError:
            return False

    def scandir(self, path: PathLike = "/") -> _Scandir:
        """The entries of a directory with their attributes, as os.scandir."""
        p = _path(path)
        rows = self._c.scandir(p)
        return _Scandir([DirEntry(self, p, name, _stat_result(t)) for name, t in rows])

    def listdir(self, path: PathLike = "/") -> List[str]:
        """The names in a directory, as os.listdir."""
        return [name for name, _ in self._c.scandir(_path(path))]

    def mkdir(self, path: PathLike, mode: int = 0o777) -> None:
        self._c.mkdir(_path(path), mode)

    def makedirs(self, path: PathLike, mode: int = 0o777, exist_ok: bool = False) -> None:
        """Makes a directory and its missing parents, as os.makedirs."""
        p = _path(path).rstrip("/") or "/"
        head = p.rsplit("/", 1)[0] or "/"
        if head != p and not self.exists(head):
            try:
                self.makedirs(head, mode, exist_ok=True)
            except FileExistsError:
                pass
        try:
            self.mkdir(p, mode)
        except OSError:
            if not exist_ok or not self.isdir(p):
                raise

    def remove(self, path: PathLike) -> None:
        """Removes a file (not a directory), as os.remove."""
        self._c.unlink(_path(path))

    unlink = remove

    def rmdir(self, path: PathLike) -> None:
        self._c.rmdir(_path(path))

    def rename(self, src: PathLike, dst: PathLike) -> None:
        """Renames, as os.rename (a file over another replaces it atomically)."""
        self._c.rename(_path(src), _path(dst))

    replace = rename

    def truncate(self, path: PathLike, length: int) -> None:
        self._c.truncate(_path(path), length)

    def readlink(self, path: PathLike) -> str:
        return self._c.readlink(_path(path))

    def walk(self, top: PathLike = "/", topdown: bool = True,
             onerror: Optional[Callable[[OSError], Any]] = None,
             followlinks: bool = False) -> Iterator[Tuple[str, List[str], List[str]]]:
        """(dirpath, dirnames, filenames) for each directory under `top`, as os.walk
        (top-down: the caller may prune dirnames)."""
        top = _path(top)
        try:
            entries = list(self.scandir(top))
        except OSError as e:
            if onerror is not None:
                onerror(e)
            return
        dirs, files, links = [], [], set()
        for e in entries:
            if e.is_dir():
                dirs.append(e.name)
                if e.is_symlink():
                    links.add(e.name)
            else:
                files.append(e.name)
        if topdown:
            yield top, dirs, files
        for d in dirs:
            if followlinks or d not in links:
                yield from self.walk(top.rstrip("/") + "/" + d, topdown, onerror, followlinks)
        if not topdown:
            yield top, dirs, files

    # ---------------------------------------------------------------- counters

    def stats(self) -> Records:
        """The daemons' counters, as `eddy stats --json` prints them: a dict per daemon;
        `to_pandas()` gives a row per daemon and operation."""
        return Records(json.loads(self._c.stats_json()), rows=stats_rows)


def connect(state: Optional[PathLike] = None) -> Client:
    """The deployment of `state`, else of EDDY_STATE (as the preload library finds it)."""
    return Client(state)


def stats(state: Optional[PathLike] = None) -> Records:
    """`eddy stats --json` of the deployment of `state` (else EDDY_STATE's), as dicts."""
    return Client(state).stats()


from . import history  # noqa: E402  (uses _eddy, imported above)

__all__ = ["Client", "DirEntry", "RawFile", "Record", "Records", "connect", "history",
           "mode_flags", "stats"]
