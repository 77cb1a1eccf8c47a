"""Fixtures of the ports of Kafka's unit tests (see ``ported.py``)."""
import os

import pytest

from ported import MockTime
from twins import kernels_of


@pytest.fixture
def no_fsync(monkeypatch):
    """``os.fsync`` does nothing during the test."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture
def kernel_mode(kernels):
    """The test, run with ``kernels`` (conftest's fixture: each kernel module) in place."""
    with kernels_of(kernels):
        yield kernels


@pytest.fixture
def time():
    return MockTime()


@pytest.fixture
def closing():
    """``closing(log)`` returns ``log`` and closes it after the test (if it is still open)."""
    opened = []

    def close_later(log):
        opened.append(log)
        return log
    yield close_later
    for log in opened:
        if not log.closed:
            log.close()
