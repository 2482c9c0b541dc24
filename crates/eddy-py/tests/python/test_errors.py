"""Bad input raises Python exceptions and never brings the interpreter down."""

import errno
import os
import re
import shutil

import pytest

import eddy


def test_wrong_types_are_type_errors(client, d):
    with pytest.raises(TypeError):
        client.open(123)
    with pytest.raises(TypeError):
        client.open(d + "/x", 5)
    with pytest.raises(TypeError):
        client.stat(None)
    with pytest.raises(TypeError):
        client.stat(b"/bytes")
    with pytest.raises(TypeError):
        client.mkdir(d + "/y", "0755")
    with client.open(d + "/f", "wb", buffering=0) as f:
        with pytest.raises(TypeError):
            f.write("text, not bytes")
        with pytest.raises(TypeError):
            f.seek("1")
    with client.open(d + "/f", "rb", buffering=0) as f:
        with pytest.raises((TypeError, BufferError)):
            f.readinto(b"read-only bytes")
        with pytest.raises(TypeError):
            f.readinto(12)


def test_bad_values_are_value_errors(client, d):
    for mode in ["rw", "", "z", "rbt", "rr", "b"]:
        with pytest.raises(ValueError):
            client.open(d + "/x", mode)
    with pytest.raises(ValueError):
        client.open(d + "/x", "w", buffering=0)
    with pytest.raises(ValueError):
        client.open(d + "/x", "wb", encoding="utf-8")
    with client.open(d + "/x", "wb", buffering=0) as f:
        with pytest.raises(ValueError):
            f.seek(0, 7)
        with pytest.raises(OSError):
            f.seek(-1)


def test_bad_paths_are_os_errors(client):
    with pytest.raises(OSError) as e:
        client.stat("/a\0b")
    assert e.value.errno == errno.EINVAL
    with pytest.raises(OSError) as e:
        client.stat("/" + "n" * 5000)
    assert e.value.errno == errno.ENAMETOOLONG


def test_a_missing_deployment_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        eddy.Client(state=str(tmp_path / "none"))


def test_no_state_at_all_is_an_os_error(monkeypatch):
    monkeypatch.delenv("EDDY_STATE")
    with pytest.raises(OSError) as e:
        eddy.connect()
    assert e.value.errno == errno.EINVAL


def test_unreachable_daemons_are_an_os_error_not_a_hang(state, tmp_path):
    text = open(os.path.join(state, "deployment.toml")).read()
    # Every daemon at an address where nobody listens, with no Unix socket.
    text = re.sub(r'addr = "127\.0\.0\.1:\d+"', 'addr = "127.0.0.1:1"', text)
    text = re.sub(r'socket = "[^"]*"', f'socket = "{tmp_path}/none.sock"', text)
    (tmp_path / "deployment.toml").write_text(text)
    with pytest.raises(OSError) as e:
        eddy.Client(state=str(tmp_path))
    assert e.value.errno in (errno.EIO, errno.ECONNREFUSED, errno.ETIMEDOUT), e.value
