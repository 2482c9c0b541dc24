"""Plain records as Eddy's commands print them with --json, with a `to_pandas()`."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - the message is the point
        raise ImportError("to_pandas() needs pandas (pip install pandas)") from e
    return pandas


class Record(Dict[str, Any]):
    """One record (a dict, as `--json` prints it)."""

    def to_pandas(self) -> Any:
        """The record as a one-row pandas DataFrame, nested fields flattened (a.b)."""
        return _pandas().json_normalize([dict(self)])


class Records(List[Dict[str, Any]]):
    """A list of records (dicts, as `--json` prints them)."""

    def __init__(self, items: Any = (), rows: Optional[Callable[[List[Dict[str, Any]]], List[Dict[str, Any]]]] = None):
        super().__init__(items)
        self._rows = rows

    def to_pandas(self) -> Any:
        """The records as a pandas DataFrame (for the daemons' counters: a row per daemon
        and operation)."""
        rows = self._rows(list(self)) if self._rows else list(self)
        return _pandas().DataFrame(rows)


def stats_rows(snaps: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The counters of `eddy stats --json`, a row per daemon and operation."""
    out = []
    for s in snaps:
        for o in s.get("ops", []):
            out.append(
                {
                    "daemon": s.get("daemon"),
                    "host": s.get("host"),
                    "job": s.get("job"),
                    "op": o.get("op"),
                    "metadata": o.get("metadata"),
                    "count": o.get("count"),
                    "errors": o.get("errors"),
                    "bytes": o.get("bytes"),
                }
            )
    return out
