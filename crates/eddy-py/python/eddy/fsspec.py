"""`eddy://`, Eddy as an fsspec file system, so that pandas, pyarrow, zarr, xarray and
dask read and write a deployment without a mount:

    pandas.read_parquet("eddy:///data/table.parquet")
    zarr.open("eddy:///data/cube.zarr", mode="w", shape=..., chunks=...)
    fsspec.filesystem("eddy", state="/path/to/state")

The package registers it under fsspec's entry point `fsspec.specs` (pyproject.toml), so
`fsspec.filesystem("eddy")` and every `eddy://` URL find it once the wheel is installed.
The deployment is EDDY_STATE's unless `state=` (a storage option) names another. Files are
the package's own `io` objects (no copy of the data on the way), paths are the namespace's.
"""

from __future__ import annotations

import stat as _stat
from typing import Any, Dict, List, Optional, Union

from fsspec.spec import AbstractFileSystem

from . import Client


def _kind(mode: int) -> str:
    if _stat.S_ISDIR(mode):
        return "directory"
    if _stat.S_ISREG(mode):
        return "file"
    return "other"


class EddyFileSystem(AbstractFileSystem):
    """fsspec's interface over `eddy.Client`."""

    protocol = "eddy"
    root_marker = "/"
    # Files are opened and closed on the deployment itself: nothing to cache per instance
    # beyond the connection.
    cachable = True

    def __init__(self, state: Optional[str] = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.client = Client(state)

    @classmethod
    def _strip_protocol(cls, path: Union[str, List[str]]) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("eddy://"):
            path = path[len("eddy://"):]
        elif path.startswith("eddy:"):
            path = path[len("eddy:"):]
        path = "/" + path.lstrip("/")
        return path.rstrip("/") or "/"

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> Dict[str, Any]:
        return {}

    def unstrip_protocol(self, name: str) -> str:
        return "eddy://" + self._strip_protocol(name)

    def _info_of(self, path: str, st: Any) -> Dict[str, Any]:
        return {
            "name": path,
            "size": st.st_size,
            "type": _kind(st.st_mode),
            "mode": st.st_mode,
            "ino": st.st_ino,
            "nlink": st.st_nlink,
            "uid": st.st_uid,
            "gid": st.st_gid,
            "mtime": st.st_mtime,
            "created": st.st_ctime,
            "islink": _stat.S_ISLNK(st.st_mode),
        }

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        p = self._strip_protocol(path)
        return self._info_of(p, self.client.stat(p))

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        p = self._strip_protocol(path)
        st = self.client.stat(p)
        if not _stat.S_ISDIR(st.st_mode):
            out = [self._info_of(p, st)]
        else:
            out = [self._info_of(e.path, e.stat(follow_symlinks=False))
                   for e in self.client.scandir(p)]
            for o in out:
                if o["islink"]:
                    try:
                        o.update(type=_kind(self.client.stat(o["name"]).st_mode))
                    except FileNotFoundError:
                        pass
        return out if detail else [o["name"] for o in out]

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self.client.exists(self._strip_protocol(path))

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        p = self._strip_protocol(path)
        if create_parents:
            self.client.makedirs(p, exist_ok=True)
        else:
            self.client.mkdir(p)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        self.client.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def rmdir(self, path: str) -> None:
        self.client.rmdir(self._strip_protocol(path))

    def rm_file(self, path: str) -> None:
        """Removes a file, or an empty directory (fsspec's `rm` removes a tree with it,
        deepest first)."""
        self._rm(path)

    def _rm(self, path: str) -> None:
        p = self._strip_protocol(path)
        if self.client.isdir(p):
            self.client.rmdir(p)
        else:
            self.client.remove(p)

    def mv(self, path1: str, path2: str, recursive: bool = False, maxdepth: Optional[int] = None,
           **kwargs: Any) -> None:
        """A rename in the namespace (no data moves)."""
        self.client.rename(self._strip_protocol(path1), self._strip_protocol(path2))

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        src, dst = self._strip_protocol(path1), self._strip_protocol(path2)
        if self.client.isdir(src):
            self.client.makedirs(dst, exist_ok=True)
            return
        size = max(self.client.chunk_size, 1 << 20)
        with self.client.open(src, "rb", buffering=0) as i, \
                self.client.open(dst, "wb", buffering=0) as o:
            buf = bytearray(size)
            while True:
                n = i.readinto(buf)
                if not n:
                    break
                view = memoryview(buf)[:n]
                while view:
                    view = view[o.write(view):]

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        p = self._strip_protocol(path)
        if truncate or not self.client.exists(p):
            with self.client.open(p, "wb"):
                pass

    def created(self, path: str) -> Any:
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["created"], datetime.timezone.utc)

    def modified(self, path: str) -> Any:
        import datetime

        return datetime.datetime.fromtimestamp(self.info(path)["mtime"], datetime.timezone.utc)

    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None,
                 **kwargs: Any) -> bytes:
        """The file's bytes [start, end): one open, one read of the size it had when
        opened (straight into the bytes returned), one close."""
        with self.client.open(self._strip_protocol(path), "rb", buffering=0) as f:
            size = f.size_at_open
            lo = 0 if start is None else (start if start >= 0 else max(size + start, 0))
            hi = size if end is None else (end if end >= 0 else max(size + end, 0))
            hi = min(hi, size)
            if hi <= lo:
                return b""
            buf = bytearray(hi - lo)
            f.seek(lo)
            got = f.readinto(buf)
            del buf[got:]
            return bytes(buf)

    def _open(self, path: str, mode: str = "rb", block_size: Any = None, autocommit: bool = True,
              cache_options: Any = None, **kwargs: Any) -> Any:
        p = self._strip_protocol(path)
        try:
            return self.client.open(p, mode)
        except FileNotFoundError:
            # Writing into a directory not there yet (as fsspec's local file system does, and
            # zarr counts on): made, then opened again.
            if not any(c in mode for c in "wax") or p == "/":
                raise
            self.client.makedirs(p.rsplit("/", 1)[0] or "/", exist_ok=True)
            return self.client.open(p, mode)
