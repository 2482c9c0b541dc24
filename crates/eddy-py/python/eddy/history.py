"""The I/O history of the jobs Eddy served, as `eddy history` shows it: the same database
(`db`: a path for SQLite or a postgres:// URL; default as the command's: the `history_db` of
the `config` file, else of the burst-buffer `site` settings, else the per-user default where
`eddy stop` stores profiles) and the same records, as plain dicts."""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Optional, Union

from . import _eddy
from ._records import Record, Records

PathLike = Union[str, "os.PathLike[str]"]


def _opt(p: Optional[PathLike]) -> Optional[str]:
    return None if p is None else os.fspath(p)


def list(  # noqa: A001 - the command's name
    db: Optional[str] = None,
    *,
    config: Optional[PathLike] = None,
    site: Optional[PathLike] = None,
    user: Optional[str] = None,
    job_name: Optional[str] = None,
    since: Optional[float] = None,
    until: Optional[float] = None,
    limit: Optional[int] = None,
) -> Records:
    """The stored jobs, newest first, as `eddy history list --json` prints them."""
    text = _eddy.history_list(db, _opt(config), _opt(site), user, job_name, since, until, limit)
    return Records(json.loads(text))


def show(job: str, db: Optional[str] = None, *, config: Optional[PathLike] = None,
         site: Optional[PathLike] = None) -> Record:
    """One job's whole profile (`eddy history show JOB --json`); JOB is its key or its Slurm
    job id. LookupError when there is none."""
    return Record(json.loads(_eddy.history_show(job, db, _opt(config), _opt(site))))


def import_logs(files: Iterable[PathLike], db: Optional[str] = None, *,
                config: Optional[PathLike] = None, site: Optional[PathLike] = None) -> Records:
    """Reads Darshan logs with PyDarshan and stores a profile per log (`eddy history
    import`); the stored profiles. Nothing is stored when one log cannot be read."""
    paths = [os.fspath(f) for f in files]
    return Records(json.loads(_eddy.history_import(paths, db, _opt(config), _opt(site))))


# `import` is a keyword: `eddy.history.import_logs`, also reachable by that name.
globals()["import"] = import_logs

__all__ = ["list", "show", "import_logs"]
