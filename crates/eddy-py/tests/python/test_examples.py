"""The examples of examples/python run as a user runs them: a separate Python process with
EDDY_STATE set, against the deployment of these tests."""

import os
import pathlib
import subprocess
import sys
import uuid

import eddy

EXAMPLES = pathlib.Path(__file__).resolve().parents[4] / "examples" / "python"


def run(name, top, state):
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / name), top],
        env={**os.environ, "EDDY_STATE": state},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"{name}: {out.stdout}{out.stderr}"
    return out.stdout.splitlines()


def test_hello_writes_reads_back_and_lists(client, state):
    top = "/ex-" + uuid.uuid4().hex[:8]
    lines = run("hello.py", top, state)
    assert lines[0] == "['a.bin', 'note.txt']"
    assert lines[1] == str(8 << 18)
    assert int(lines[2].split()[0]) >= 8 << 18
    with client.open(top + "/note.txt") as f:
        assert f.read() == "written from Python\n"


def test_dataframes_go_through_eddy_urls(client, state):
    top = "/ex-" + uuid.uuid4().hex[:8]
    lines = run("dataframes.py", top, state)
    assert lines == ["1000 (64, 64)"]
    assert client.isfile(top + "/table.parquet") and client.isdir(top + "/grid.zarr")
    assert isinstance(eddy.connect().stat(top + "/table.parquet").st_size, int)
