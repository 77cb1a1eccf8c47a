"""A wrong path (missing, a file where a directory is expected and the reverse, a log dir where
a partition is expected, an empty directory) raises a typed error that names the path once and
says what was found there; nothing comes back empty without a word (issue 32)."""
from __future__ import annotations

import logging

import pytest

from kafkalog import Log
from kafkalog.cli import main
from kafkalog.errors import (
    KafkaLogError, LogDirFailureError, LogNotFoundError, NotAPartitionDirectoryError,
    NotASegmentFileError, PartitionNotFoundError,
)
from kafkalog.manager import LogManager
from kafkalog.records import iter_batches
from kafkalog.verify import verify_partition

LOG0 = "00000000000000000000.log"


def names_once(e, path, *found):
    text = str(e)
    assert text.count(str(path)) == 1, text
    for words in found:
        assert words in text, text


@pytest.fixture
def log_dir(fixture_copy):
    """A log dir holding two partition directories."""
    a = fixture_copy("plain-0")
    fixture_copy("txn-0")
    return a.parent


def test_iter_batches_of_a_missing_file(tmp_path):
    path = tmp_path / LOG0
    with pytest.raises(LogNotFoundError) as e:
        list(iter_batches(path))
    assert isinstance(e.value, FileNotFoundError)
    names_once(e.value, path, "no such file")


def test_iter_batches_of_a_directory(fixture_copy):
    d = fixture_copy("plain-0")
    with pytest.raises(NotASegmentFileError) as e:
        list(iter_batches(d))
    assert isinstance(e.value, (KafkaLogError, IsADirectoryError))
    names_once(e.value, d, "a directory")


def test_verify_partition_of_a_missing_path(tmp_path):
    path = tmp_path / "nothing-0"
    with pytest.raises(LogNotFoundError) as e:
        verify_partition(path)
    assert isinstance(e.value, FileNotFoundError)
    names_once(e.value, path, "no such file or directory")


def test_verify_partition_of_a_file(fixture_copy):
    path = fixture_copy("plain-0") / LOG0
    with pytest.raises(NotAPartitionDirectoryError) as e:
        verify_partition(path)
    assert isinstance(e.value, NotADirectoryError) and isinstance(e.value, PartitionNotFoundError)
    names_once(e.value, path, "a .log file of partition directory")


def test_verify_partition_of_a_log_dir(log_dir):
    with pytest.raises(PartitionNotFoundError) as e:
        verify_partition(log_dir)
    names_once(e.value, log_dir, "a log dir holding 2 partition directories",
               "plain-0, txn-0", "LogManager")


def test_log_open_of_a_segment_file(fixture_copy):
    path = fixture_copy("plain-0") / LOG0
    for read_only in (True, False):
        with pytest.raises(NotAPartitionDirectoryError) as e:
            Log.open(path, read_only=read_only)
        assert isinstance(e.value, LogNotFoundError)
        names_once(e.value, path, "a .log file of partition directory")
        assert "no such" not in str(e.value)


def test_log_open_of_a_log_dir(log_dir):
    for read_only in (True, False):
        with pytest.raises(PartitionNotFoundError) as e:
            Log.open(log_dir, read_only=read_only)
        names_once(e.value, log_dir, "a log dir holding 2 partition directories",
                   "plain-0, txn-0", "LogManager")
    assert sorted(p.name for p in log_dir.iterdir()) == ["plain-0", "txn-0"]


def test_log_open_read_only_of_an_empty_directory(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    with pytest.raises(PartitionNotFoundError) as e:
        Log.open(d, read_only=True)
    assert not isinstance(e.value, LogDirFailureError)
    names_once(e.value, d, "an empty directory")
    named = tmp_path / "topic-0"
    named.mkdir()
    with pytest.raises(LogNotFoundError) as e:
        Log.open(named, read_only=True)
    names_once(e.value, named, "holding no .log segment")


def test_log_open_of_a_missing_directory(tmp_path):
    path = tmp_path / "topic-0"
    with pytest.raises(LogNotFoundError) as e:
        Log.open(path, read_only=True)
    names_once(e.value, path, "no such")
    with Log.open(path) as log:                    # a writable open creates it, as before
        assert log.offsets().log_end_offset == 0


def test_cli_dump_of_an_empty_directory(tmp_path, capfd):
    d = tmp_path / "empty"
    d.mkdir()
    assert main(["dump", str(d)]) == 1
    captured = capfd.readouterr()
    assert captured.out == ""
    names_once(captured.err, d, "an empty directory")


def test_cli_dump_of_a_missing_path(tmp_path, capfd):
    path = tmp_path / "nothing"
    assert main(["dump", str(path)]) == 1
    names_once(capfd.readouterr().err, path, "no such file or directory")


def test_cli_verify_of_a_file(fixture_copy, capfd):
    path = fixture_copy("plain-0") / LOG0
    assert main(["verify", str(path)]) == 1
    out = capfd.readouterr().out
    names_once(out, path, "a .log file of partition directory")
    assert "no such directory" not in out


def test_cli_verify_of_an_empty_directory(tmp_path, capfd):
    assert main(["verify", str(tmp_path)]) == 1
    names_once(capfd.readouterr().out, tmp_path, "an empty directory")


def test_read_arrow_of_an_empty_directory(tmp_path):
    pytest.importorskip("pyarrow")
    from kafkalog.arrow import read_arrow
    with pytest.raises(PartitionNotFoundError) as e:
        read_arrow(tmp_path)
    names_once(e.value, tmp_path, "an empty directory")


def test_log_manager_of_an_empty_log_dir_says_so(tmp_path, caplog):
    # Read-only, an empty directory has nothing to read: a typed error (issue 41)...
    with pytest.raises(PartitionNotFoundError) as e:
        LogManager([tmp_path], read_only=True)
    names_once(e.value, tmp_path, "an empty directory")
    # ...writable, it is a new broker's log dir, as in Kafka: INFO rather than a warning.
    with caplog.at_level(logging.INFO, logger="kafkalog"):
        with LogManager([tmp_path], background=False) as manager:
            assert manager.logs() == {}
    said = [r for r in caplog.records if r.name.startswith("kafkalog")
            and str(tmp_path) in r.getMessage() and "no partition" in r.getMessage()]
    assert said and said[0].levelno == logging.INFO


@pytest.mark.parametrize("command", ["dump", "verify", "recover", "salvage", "offsets"])
def test_cli_names_a_missing_path_once(tmp_path, capfd, command):
    path = tmp_path / "nothing"
    assert main([command, str(path)]) == 1
    captured = capfd.readouterr()
    said = captured.out if command == "verify" else captured.err    # verify's report: stdout
    names_once(said, path, "no such file or directory")


def test_cli_dump_of_a_missing_segment_file(tmp_path, capfd):
    path = tmp_path / LOG0
    assert main(["dump", str(path)]) == 1
    names_once(capfd.readouterr().err, path, "no such file or directory")
