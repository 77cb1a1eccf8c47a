"""What the ports of Kafka's unit tests in ``tests/kafka/`` share.

Its fixtures are ``kernel_mode``, ``no_fsync``, ``time`` and ``closing`` (see below how a
module takes them).

- ``no_api(reason)``: the stand-in for an upstream test that has nothing to run against in
  kafkalog; it skips with ``no API: <reason>``. A port lists it under the upstream test's name
  (``test_force_unmap = no_api("...")``), so every upstream case has its line in the report;
  ``no_api_cases(globals(), reason, *names)`` does it for several cases of one reason.
- ``kernel_mode``: runs a test once with the compiled kernels and once with
  their pure-Python twins swapped in (``twins.kernels_of``), for ports whose cases go through
  the kernels; a module takes it with ``pytestmark = pytest.mark.usefixtures("kernel_mode")``.
- ``no_fsync``: makes ``os.fsync`` do nothing, for ports that roll and reopen
  whole logs: what they check is what loading and recovery make of the files, not that the
  files are durable, and a roll's fsyncs cost milliseconds on a busy disk.
- ``MockTime`` (the ``time`` fixture is one), ``open_log``, ``log_config`` and the append
  helpers of upstream's ``LogTestUtils``; the ``closing`` fixture closes the logs a test
  opened (upstream's ``logsToClose``).
"""
import os

import pytest

from twins import kernels_of



def no_api(reason):
    """An upstream test kafkalog has no API for: a test that skips, saying why."""
    def upstream_test_without_api():
        pytest.skip(f"no API: {reason}")
    return upstream_test_without_api


def no_api_cases(namespace, reason, *names):
    """``no_api(reason)`` under each of ``names`` in ``namespace`` (a module's globals)."""
    for name in names:
        namespace[name] = no_api(reason)


class MockTime:
    """Kafka's MockTime for kafkalog: ``time_fn`` of a Log or LogSegment (seconds) that only
    moves with ``sleep``; ``ms`` is the time in milliseconds."""

    def __init__(self, ms=1_700_000_000_000):
        self.ms = ms

    def __call__(self):
        return self.ms / 1000

    def sleep(self, ms):
        self.ms += ms


def log_config(defaults=None, **settings):
    """Upstream's ``LogTestUtils.createLogConfig``: ``settings`` named as Kafka's topic
    configs with ``_`` for ``.`` (``segment_bytes=1024``), over ``defaults``."""
    from kafkalog.config import LogConfig
    return LogConfig({**(defaults or {}), **{k.replace("_", "."): v for k, v in settings.items()}})


def open_log(path, config=None, time=None, *, recovery_point=0, log_start_offset=0,
             clean_shutdown=True, **kwargs):
    """Upstream's ``createLog``: a log opened with the offsets and shutdown state given
    (defaults as upstream: recovery point and log start 0, last shutdown clean)."""
    from kafkalog.log import Log
    if time is not None:
        kwargs["time_fn"] = time
    return Log.open(path, config, recovery_point=recovery_point,
                    log_start_offset=log_start_offset, clean_shutdown=clean_shutdown, **kwargs)


def value_records(values, timestamp=None):
    """Records with these values (bytes or str), as build_batch takes them."""
    return [dict(value=v.encode() if isinstance(v, str) else v, timestamp=timestamp)
            for v in values]


def append_non_transactional(log, n):
    """Upstream's ``appendNonTransactionalAsLeader``: ``n`` records "0".."n-1"."""
    log.append(value_records(str(i) for i in range(n)))


def keyed_records(keys, timestamp=None):
    """Records whose key and value are the key's digits (upstream's ``key.toString``)."""
    return [dict(key=str(k).encode(), value=str(k).encode(), timestamp=timestamp) for k in keys]


def idempotent_appender(log, producer_id, epoch, time, transactional=False):
    """Upstream's ``appendIdempotentAsLeader`` / ``appendTransactionalAsLeader``: a function
    appending the producer's next records, its sequence going on from call to call; given a
    count ``n`` (``LogTestUtils``) the records are unkeyed, "seq".."seq+n-1", given a list of
    keys (``LogCleanerTest``) they are ``keyed_records``. Returns the ``LogAppendInfo``."""
    sequence = 0

    def append(n_or_keys):
        nonlocal sequence
        records = value_records((str(s) for s in range(sequence, sequence + n_or_keys)),
                                time.ms) if isinstance(n_or_keys, int) else \
            keyed_records(n_or_keys, time.ms)
        info = log.append(records, producer_id=producer_id, producer_epoch=epoch,
                          base_sequence=sequence, transactional=transactional)
        sequence += len(records)
        return info
    return append


def append_end_txn_marker(log, producer_id, epoch, control, timestamp,
                          coordinator_epoch=0, leader_epoch=0):
    """Upstream's ``appendEndTxnMarkerAsLeader`` (``control``: "commit" / "abort")."""
    from kafkalog import build_control_batch
    return log.append(build_control_batch(
        control, producer_id=producer_id, producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch, timestamp=timestamp,
        partition_leader_epoch=leader_epoch))


def all_aborted_transactions(log):
    """Upstream's ``allAbortedTransactions``: every segment's transaction index entries."""
    return [txn for segment in log.segments for txn in segment.txn_index.all_aborted_txns()]


# The fixtures: a module takes them by importing their functions (``_time_fixture``...), under
# the fixture's name (``time``...); not from a conftest.py here, which would take the place of
# tests/conftest.py as the ``conftest`` module other test modules import.
@pytest.fixture(name="no_fsync")
def _no_fsync_fixture(monkeypatch):
    """``os.fsync`` does nothing during the test."""
    monkeypatch.setattr(os, "fsync", lambda fd: None)


@pytest.fixture(name="kernel_mode")
def _kernel_mode_fixture(kernels):
    """The test, run with ``kernels`` (conftest's fixture: each kernel module) in place."""
    with kernels_of(kernels):
        yield kernels


@pytest.fixture(name="time")
def _time_fixture():
    return MockTime()


@pytest.fixture(name="closing")
def _closing_fixture():
    """``closing(log)`` returns ``log`` and closes it after the test (if it is still open)."""
    opened = []

    def close_later(log):
        opened.append(log)
        return log
    yield close_later
    for log in opened:
        if not log.closed:
            log.close()
