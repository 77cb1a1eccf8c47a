"""A newcomer's wrong inputs (issue 41): a misspelt option or setting is refused with the
closest name, a path above the log dirs says what it read and leaves Kafka's internal topics
out unless asked for, a path that holds nothing to open is a typed error saying what was
found there, and damaged data names the option that skips it. Small logs written here; no
Spark (the Spark source checks its options with the same ``Options`` and plans with the same
planner as ``read_arrow``)."""
from __future__ import annotations

import logging
import os

import pytest

import kafkalog
from kafkalog import Log, LogManager, Log07, iter_batches
from kafkalog.cli import main
from kafkalog.errors import (
    CorruptRecordError, InvalidConfigError, NotAPartitionDirectoryError, NotASegmentFileError,
    PartitionNotFoundError,
)
from kafkalog.spark.options import Options

pa = pytest.importorskip("pyarrow")
from kafkalog.arrow import read_arrow  # noqa: E402

INTERNAL = ("__consumer_offsets-0", "__transaction_state-1")


def write(path, records=5):
    """A partition directory of ``records`` records in one batch; its .log file's path."""
    with Log.open(path) as log:
        log.append([kafkalog.Record(key=b"k%d" % i, value=b"v%d" % i, timestamp=1000 + i)
                    for i in range(records)])
        return log.segments[0].log_path


@pytest.fixture(scope="module")
def above(tmp_path_factory):
    """A folder holding a log dir ``ld``: ``orders-0``, ``orders-1`` and two internal topics'
    partitions."""
    root = tmp_path_factory.mktemp("above")
    for name in ("orders-0", "orders-1") + INTERNAL:
        write(root / "ld" / name)
    return root


def topics(table):
    return sorted(set(table.column("topic").to_pylist()))


# ------------------------------------------------------------------------- options, settings
def test_a_misspelt_kafka_option_is_refused_with_the_closest_name(above):
    with pytest.raises(InvalidConfigError, match=r"kafka\.isolation\.levl \(did you mean "
                                                 r"kafka\.isolation\.level\?\)"):
        read_arrow(above / "ld" / "orders-0", **{"kafka.isolation.levl": "read_committed"})
    with pytest.raises(InvalidConfigError, match="kafka.boostrap.servers .did you mean "
                                                 "kafka.bootstrap.servers"):
        Options({"kafka.boostrap.servers": "h:9092"})
    with pytest.raises(InvalidConfigError, match="kafka.frobnicate .no Kafka consumer setting"):
        Options({"kafka.frobnicate": "1"})
    # the consumer's settings (security, tuning, a config provider's) are known, and ignored
    Options({"kafka.bootstrap.servers": "h:9092", "kafka.security.protocol": "SASL_SSL",
             "kafka.sasl.jaas.config": "x", "kafka.ssl.truststore.location": "/t",
             "kafka.config.providers.file.class": "x", "kafka.max.poll.records": "5"})


def test_a_typo_in_a_setting_names_the_closest_one():
    with pytest.raises(InvalidConfigError) as e:
        kafkalog.LogConfig({"retention.msx": 5})
    assert "retention.msx (did you mean retention.ms?)" in str(e.value)
    assert "cleanup.policy" not in str(e.value)          # not the list of every setting


def test_an_unknown_isolation_is_an_invalid_config_naming_the_closest(above):
    with Log.open(above / "ld" / "orders-0", read_only=True) as log:
        with pytest.raises(InvalidConfigError, match="'commited' .did you mean committed"):
            list(log.records(isolation="commited"))


def test_a_timestamp_option_that_is_no_number_is_named(above):
    with pytest.raises(InvalidConfigError, match="option startingTimestamp: Expected a "
                                                 "single long value, got yesterday"):
        read_arrow(above, startingTimestamp="yesterday")


@pytest.mark.parametrize("paths", [123, [123], None])
def test_paths_of_the_wrong_type_are_an_invalid_config(paths):
    with pytest.raises(InvalidConfigError, match="paths must be a path"):
        read_arrow(paths)


# ------------------------------------------------------------------- a path above the log dirs
def test_a_path_above_the_log_dirs_says_what_it_read_and_leaves_internal_topics_out(
        above, caplog):
    with caplog.at_level(logging.INFO, logger="kafkalog"):
        table = read_arrow(above)
    assert topics(table) == ["orders"] and table.num_rows == 10
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("is above the log dirs: reading the partition directories below it, by log "
               "dir: ld (4)" in m for m in said), said
    assert any("__consumer_offsets (1), __transaction_state (1)" in m and
               "kafka.exclude.internal.topics=false" in m for m in said), said
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="kafkalog"):
        read_arrow(above / "ld")                          # a log dir: nothing to say of it
    assert not [r for r in caplog.records if "above the log dirs" in r.getMessage()]


@pytest.mark.parametrize("options, wanted", [
    ({"exclude_internal_topics": False}, ["__consumer_offsets", "__transaction_state", "orders"]),
    ({"kafka.exclude.internal.topics": "false"},
     ["__consumer_offsets", "__transaction_state", "orders"]),
    ({"subscribe": "__consumer_offsets"}, ["__consumer_offsets"]),   # named: read
    ({"subscribePattern": ".*"}, ["orders"]),      # a pattern leaves them out, as in Kafka
])
def test_internal_topics_are_read_when_asked_for(above, options, wanted):
    assert topics(read_arrow(above, **options)) == wanted


def test_an_internal_partition_given_as_the_path_is_read(above):
    assert topics(read_arrow(above / "ld" / "__consumer_offsets-0")) == ["__consumer_offsets"]


def test_a_log_dir_of_internal_topics_only_warns(tmp_path, caplog):
    write(tmp_path / "__consumer_offsets-3")
    with caplog.at_level(logging.WARNING, logger="kafkalog"):
        assert read_arrow(tmp_path).num_rows == 0
    assert any("internal topics __consumer_offsets (1)" in r.getMessage()
               for r in caplog.records)


# ------------------------------------------------------------------ damaged data, skip option
def test_damaged_data_names_the_option_that_skips_it(tmp_path):
    write(tmp_path / "good-0")
    bad = write(tmp_path / "bad-0")
    with open(bad, "r+b") as f:                      # a byte of the last record's value
        f.seek(os.path.getsize(bad) - 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(CorruptRecordError) as e:
        read_arrow(tmp_path)
    assert "CRC" in str(e.value) and "failOnDataLoss=false" in str(e.value) and \
        "fail_on_data_loss=False" in str(e.value)
    assert topics(read_arrow(tmp_path, fail_on_data_loss=False)) == ["good"]


# ------------------------------------------------------------ LogManager, Log07, dump: typed
def test_log_manager_of_a_file_says_it_is_one(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotAPartitionDirectoryError, match="a regular file, where"):
        LogManager([tmp_path / "file"], background=False)


def test_log_manager_of_a_path_above_the_log_dirs_says_where_they_are(above, tmp_path):
    with pytest.raises(PartitionNotFoundError, match=r"the log dirs below it do: ld \(4\)"):
        LogManager([above], read_only=True)
    high = tmp_path / "high"
    write(high / "ld" / "t-0")
    with pytest.raises(PartitionNotFoundError, match="give the log dirs themselves"):
        LogManager([high], background=False)
    assert sorted(os.listdir(high)) == ["ld"]                 # nothing written there
    with pytest.raises(PartitionNotFoundError, match="an empty directory"):
        LogManager([_empty(tmp_path)], read_only=True)      # nothing to read


def _empty(tmp_path):
    (tmp_path / "empty").mkdir()
    return tmp_path / "empty"


def test_log07_open_of_what_is_no_0_7_partition(above, tmp_path):
    with pytest.raises(PartitionNotFoundError, match="Kafka 0.8.*open it with Log.open"):
        Log07.open(above / "ld" / "orders-0", read_only=True)
    with pytest.raises(PartitionNotFoundError, match="a log dir holding 4 partition"):
        Log07.open(above / "ld", read_only=True)
    with pytest.raises(PartitionNotFoundError, match="an empty directory"):
        Log07.open(_empty(tmp_path), read_only=True)
    with Log07.open(tmp_path / "empty") as log:      # writable: a new 0.7 partition
        log.append([b"a"])
    with Log07.open(tmp_path / "empty", read_only=True) as log:
        assert [m.payload for m in log.messages()] == [b"a"]


def test_dump_of_an_empty_directory_named_like_a_partition(tmp_path, capfd):
    (tmp_path / "e-0").mkdir()
    assert main(["dump", str(tmp_path / "e-0")]) == 1
    err = capfd.readouterr().err
    assert "named like a partition directory but holding no .log segment: empty" in err
    (tmp_path / "e-0" / "leader-epoch-checkpoint").write_text("0\n0\n")
    assert main(["dump", str(tmp_path / "e-0")]) == 0       # a file of one: dumped


# ---------------------------------------------------------------- iter_batches: no segment
def test_iter_batches_of_what_is_no_segment(above, tmp_path):
    index = str(above / "ld" / "orders-0" / "00000000000000000000.index")
    with pytest.raises(NotASegmentFileError, match=r"a \.index file of a partition, not a "
                                                   r"segment"):
        list(iter_batches(index))
    text = tmp_path / "notes.txt"
    text.write_text("hello world, this is no segment\n" * 3)
    with pytest.raises(NotASegmentFileError, match="no record batch at position 0"):
        list(iter_batches(text))
    # batches under any other name are read
    other = tmp_path / "batches.bin"
    other.write_bytes((above / "ld" / "orders-0" / "00000000000000000000.log").read_bytes())
    assert sum(len(b) for b in iter_batches(other)) == 5
