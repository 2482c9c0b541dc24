"""The deployment the tests use: EDDY_STATE, started by tests/pytest.rs with the real `eddy
start --local 3` (three daemons, 64 KiB chunks so that small files cross chunks and daemons).
Every test works under a directory of its own."""

import os
import uuid

import pytest

import eddy


def pytest_configure(config):
    config.addinivalue_line("markers", "history: runs after the deployment stopped (its profile stored)")


@pytest.fixture(scope="session")
def state():
    s = os.environ.get("EDDY_STATE")
    if not s:
        pytest.fail("EDDY_STATE is not set: run these tests through crates/eddy-py/tests/pytest.rs")
    return s


@pytest.fixture(scope="session")
def client(state):
    return eddy.connect()


@pytest.fixture
def d(client):
    """A fresh directory of the namespace for one test."""
    path = "/t-" + uuid.uuid4().hex[:12]
    client.mkdir(path)
    return path


@pytest.fixture(scope="session")
def eddy_bin():
    b = os.environ.get("EDDY_BIN")
    if not b:
        pytest.fail("EDDY_BIN (the eddy program) is not set")
    return b
