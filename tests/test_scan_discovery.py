"""kafkalog.log_dirs.partition_dirs (the one listing of partition directories: the scan
planner's, verify's, dump's) at any depth, and the errors the scan core raises for paths that
name no partition (no Spark)."""
import logging
import shutil

import pytest

import kafkalog
from kafkalog.errors import LogNotFoundError, PartitionNotFoundError
from kafkalog.log import Log
from kafkalog.log_dirs import partition_dirs
from kafkalog.spark import plan

from conftest import FIXTURES


def write(path, n=3):
    log = Log.open(path)
    try:
        log.append([kafkalog.Record(value=b"v%d" % i) for i in range(n)])
    finally:
        log.close()


def test_recursive_finds_log_dirs_in_folders_and_stops_at_a_partition(tmp_path):
    write(tmp_path / "broker1" / "t-0")
    write(tmp_path / "broker2" / "deep" / "t-1")
    write(tmp_path / "broker2" / "deep" / "t-1" / "inner-5")      # inside a partition: unseen
    assert partition_dirs(tmp_path) == []                           # one level only
    assert partition_dirs(tmp_path, recursive=True) == [
        str(tmp_path / "broker1" / "t-0"), str(tmp_path / "broker2" / "deep" / "t-1")]
    assert partition_dirs("file://" + str(tmp_path / "broker1")) == [str(tmp_path / "broker1" /
                                                                          "t-0")]


def test_a_missing_path(tmp_path):
    for call in (lambda p: partition_dirs(p), lambda p: plan([p]),
                 lambda p: kafkalog.read_arrow(p)):
        with pytest.raises(LogNotFoundError, match="nowhere: no such file or directory"):
            call(tmp_path / "nowhere")


def test_a_file_where_a_directory_is_expected(tmp_path):
    write(tmp_path / "t-0")
    segment = tmp_path / "t-0" / "00000000000000000000.log"
    with pytest.raises(PartitionNotFoundError) as e:
        plan([segment])
    assert str(segment) in str(e.value)
    assert f"a .log file of partition directory {tmp_path / 't-0'}: give the directory" \
        in str(e.value)
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(PartitionNotFoundError, match="notes.txt: a regular file, where a "
                                                     "partition directory or a log dir"):
        kafkalog.read_arrow(tmp_path / "notes.txt")
    assert isinstance(e.value, FileNotFoundError)          # as a missing path was before


def test_a_directory_holding_no_partition_says_what_it_holds(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(PartitionNotFoundError, match="empty: neither a partition directory "
                                                     "nor a log dir holding any "
                                                     r"\(an empty directory\)"):
        plan([tmp_path / "empty"])
    other = tmp_path / "other"
    (other / "sub").mkdir(parents=True)
    (other / "README").write_text("x")
    with pytest.raises(PartitionNotFoundError,
                       match=r"1 file and 1 directory holding no .log segment: "
                             "README, sub/"):
        kafkalog.read_arrow(other)
    (tmp_path / "t-3").mkdir()
    with pytest.raises(PartitionNotFoundError, match="named like a partition directory but "
                                                     "holding no .log segment"):
        plan([tmp_path / "t-3"])


def test_segments_in_a_directory_not_named_topic_partition(tmp_path):
    """Given as a path: an error naming it (the topic and partition come from the name; it
    read zero rows). Below a log dir: a broker's -delete copy, skipped."""
    shutil.copytree(FIXTURES / "multiseg-0", tmp_path / "copy")
    with pytest.raises(PartitionNotFoundError, match="copy: holds segments but is not named "
                                                     "<topic>-<partition>"):
        plan([tmp_path / "copy"])
    logs = tmp_path / "logs"
    shutil.copytree(FIXTURES / "multiseg-0", logs / "multiseg-0")
    shutil.copytree(FIXTURES / "multiseg-0", logs / "multiseg-1.0123456789abcdef-delete")
    assert {(t["topic"], t["partition"]) for t in plan([logs])} == {("multiseg", 0)}


def test_a_log_dir_and_a_partition_directory_both_plan(tmp_path):
    write(tmp_path / "t-0")
    write(tmp_path / "t-1")
    assert {t["partition"] for t in plan([tmp_path])} == {0, 1}
    assert {t["partition"] for t in plan([tmp_path / "t-1"])} == {1}


@pytest.mark.parametrize("option, value", [("subscribe", "nosuchtopic1"),
                                           ("subscribePattern", "nosuch.*2"),
                                           ("assign", '{"t": [7]}')])
def test_a_selection_matching_nothing_is_empty_with_a_warning(tmp_path, caplog, option,
                                                              value):
    write(tmp_path / "t-0")
    with caplog.at_level(logging.WARNING, logger="kafkalog.scan.planner"):
        assert plan([tmp_path], {option: value}) == []
    assert f"{option} {value!r} matches no partition: the paths hold 1 (t-0)" in caplog.text
