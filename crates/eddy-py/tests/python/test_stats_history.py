"""eddy.stats() and eddy.history: what `eddy stats --json` and `eddy history` give, as
dicts, with to_pandas()."""

import json
import os
import subprocess

import pandas as pd
import pytest

import eddy


def cli(eddy_bin, *args):
    out = subprocess.run([eddy_bin, *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def test_stats_are_what_eddy_stats_json_prints(client, d, state, eddy_bin):
    with client.open(d + "/f", "wb") as f:
        f.write(b"x" * 200_000)
    snaps = eddy.stats()
    assert isinstance(snaps, list) and all(type(s) is dict for s in snaps)
    theirs = cli(eddy_bin, "stats", "--json", "--state", state)
    assert [s["daemon"] for s in snaps] == [s["daemon"] for s in theirs] == [0, 1, 2]
    assert [set(s) for s in snaps] == [set(s) for s in theirs]
    # Written through the daemons, or directly into a daemon's files of this host and then
    # committed (as `eddy stats` counts them).
    ops = ("write", "direct_commit")
    written = sum(o["bytes"] for s in snaps for o in s["ops"] if o["op"] in ops)
    assert written >= 200_000
    df = snaps.to_pandas()
    assert isinstance(df, pd.DataFrame)
    assert {"daemon", "host", "op", "count", "bytes"} <= set(df.columns)
    assert df[df.op.isin(ops)].bytes.sum() == written


@pytest.mark.history
def test_history_is_what_eddy_history_prints(eddy_bin):
    db = os.environ.get("EDDY_TEST_HISTORY_DB")
    if not db:
        pytest.fail("EDDY_TEST_HISTORY_DB is not set (tests/pytest.rs sets it after the stop)")
    jobs = eddy.history.list(db)
    assert jobs == cli(eddy_bin, "history", "list", "--json", "--db", db)
    assert len(jobs) >= 1 and all(type(j) is dict for j in jobs)
    key = jobs[0]["key"]
    profile = eddy.history.show(key, db)
    assert profile == cli(eddy_bin, "history", "show", key, "--json", "--db", db)
    assert profile["written_bytes"] > 0
    assert isinstance(jobs.to_pandas(), pd.DataFrame) and len(jobs.to_pandas()) == len(jobs)
    assert profile.to_pandas()["key"][0] == key
    assert eddy.history.list(db, limit=1) == jobs[:1]
    with pytest.raises(LookupError):
        eddy.history.show("no-such-job", db)
    with pytest.raises(RuntimeError):
        eddy.history.import_logs(["/nonexistent.darshan"], db)
