"""Offsets must increase (issue #39 part 3): a batch whose base offset (which its CRC does not
cover) is damaged is data loss for every reader of the walk, never a row twice or a silent
gap; verify reports it once and checks the indexes against the batches in file order."""
import json
import logging
import struct

import numpy as np
import pytest

from kafkalog import Log, Record, build_batch, iter_batches, segment_walker
from kafkalog.cli import main
from kafkalog.errors import CorruptRecordError, OffsetsOutOfOrderError
from kafkalog.salvage import salvage_partition
from kafkalog.segment_walker import (
    DUMP, ITERATE_LENIENT, RECOVER, SALVAGE, FileWalk, Outcome, walk_segment,
)
from kafkalog.verify import verify_partition

ONE = len(build_batch([Record(key=b"k", value=b"v" * 50, timestamp=0)], base_offset=0))


def log_bytes(bases):
    return b"".join(build_batch([Record(key=b"k", value=b"v" * 50, timestamp=i)],
                                base_offset=b) for i, b in enumerate(bases))


@pytest.fixture
def impl(kernels, monkeypatch):
    monkeypatch.setattr(segment_walker, "walk_batches", kernels.walk_batches)
    monkeypatch.setattr(segment_walker, "next_valid_batch", kernels.next_valid_batch)
    return kernels


# the third batch claims offset 1 (a bit of its base offset flipped): 0, 1, [1], 3, 4
BACK = log_bytes([0, 1, 1, 3, 4])


def test_iterate_raises_after_the_batches_before(impl):
    walk = walk_segment(BACK, path="x.log")
    assert walk.batches["base_offset"].tolist() == [0, 1]
    assert walk.ended_early and walk.outcome is Outcome.OUT_OF_ORDER and walk.stop == 2 * ONE
    with pytest.raises(OffsetsOutOfOrderError) as e:
        walk.raise_for_outcome()
    err = e.value
    assert isinstance(err, CorruptRecordError)
    assert (err.path, err.position, err.base_offset, err.previous_offset) == \
        ("x.log", 2 * ONE, 1, 1)
    assert "failOnDataLoss=false" in str(err)


def test_lenient_skips_with_a_warning(impl, caplog):
    with caplog.at_level(logging.WARNING, "kafkalog"):
        walk = walk_segment(BACK, policy=ITERATE_LENIENT, path="x.log")
    assert walk.batches["base_offset"].tolist() == [0, 1, 3, 4] and walk.error is None
    assert "failOnDataLoss=false" in caplog.text and "position %d" % (2 * ONE) in caplog.text


def test_salvage_skips_dump_keeps_recover_does_not_look(impl):
    salvage = walk_segment(BACK, policy=SALVAGE)
    assert salvage.batches["base_offset"].tolist() == [0, 1, 3, 4]
    assert [(e.code, e.start, e.end) for e in salvage.events] == \
        [("offsets_not_increasing", 2 * ONE, 3 * ONE)]
    dump = walk_segment(BACK, policy=DUMP)
    assert dump.batches["base_offset"].tolist() == [0, 1, 1, 3, 4]
    assert [e.code for e in dump.events] == ["offsets_not_increasing"]
    assert walk_segment(BACK, policy=RECOVER).events == []


def test_an_upward_jump_is_no_damage_and_the_bound_is_checked(impl):
    assert walk_segment(log_bytes([0, 7, 9])).events == []       # a compacted log's gaps
    walk = walk_segment(log_bytes([5, 6]), after=5)               # e.g. a segment's base - 1
    assert walk.batches["base_offset"].tolist() == [] and walk.error is not None
    assert walk_segment(log_bytes([5, 6]), after=4).error is None


def test_the_streamed_walk_carries_the_bound_across_stretches(impl):
    data = log_bytes([0, 1, 2, 3, 1, 5, 6])
    walk = FileWalk(lambda p, n: data[p:p + n], len(data), len(data), policy=DUMP,
                    first=ONE, most=2 * ONE)
    assert sum(len(b) for _, _, b in walk) == 7
    assert [(e.code, e.start) for e in walk.events] == [("offsets_not_increasing", 4 * ONE)]


# ----------------------------------------------------------------- the scenario
def _flipped(fixture_copy, bit=12):
    """multiseg-0 with one bit of batch 15000-15009's base offset flipped: it claims 10904
    (bit 12) or 16024 (bit 10, the next segment's offsets)."""
    directory = fixture_copy("multiseg-0")
    path = directory / "00000000000000014000.log"
    data = bytearray(path.read_bytes())
    rows = walk_segment(bytes(data)).batches
    pos = int(rows["position"][rows["base_offset"] == 15000][0])
    struct.pack_into(">q", data, pos, 15000 ^ (1 << bit))
    path.write_bytes(bytes(data))
    return directory, path, pos


def test_a_damaged_base_offset_is_data_loss_for_every_reader(fixture_copy, caplog):
    pytest.importorskip("pyarrow")
    from kafkalog import read_arrow
    directory, path, pos = _flipped(fixture_copy)
    with pytest.raises(OffsetsOutOfOrderError) as e:
        read_arrow(directory)
    assert (e.value.path, e.value.position, e.value.base_offset, e.value.previous_offset) == \
        (str(path), pos, 10904, 14999)
    with caplog.at_level(logging.WARNING, "kafkalog"):
        offsets = read_arrow(directory, failOnDataLoss=False).column("offset").to_numpy()
    assert len(offsets) == len(np.unique(offsets)) == 29990 and "skipped" in caplog.text
    assert not np.isin(np.arange(15000, 15010), offsets).any()
    with Log.open(directory, read_only=True) as log:
        with pytest.raises(OffsetsOutOfOrderError):
            for _ in log.records(14000):
                pass
    with pytest.raises(OffsetsOutOfOrderError):
        list(iter_batches(path))


def test_verify_salvage_and_recover_see_it_once(fixture_copy, capfd):
    directory, path, pos = _flipped(fixture_copy)
    report = verify_partition(directory)
    assert [(p["code"], p["position"], p["offset"]) for p in report["problems"]] == \
        [("offsets_not_increasing", pos, 10904)]      # no false time_index_mismatch
    salvage = salvage_partition(directory)
    assert salvage.record_count == 29990
    assert [(g.code, g.offset_before, g.offset_after) for g in salvage.gaps] == \
        [("offsets_not_increasing", 14999, 15010)]
    main(["recover", "--dry-run", "--json", str(directory)])
    (part,) = json.loads(capfd.readouterr().out)["partitions"]
    # Kafka's recovery splits a segment whose offsets do not fit its base; nothing dropped
    assert [a["action"] for a in part["actions"]] == ["split_segment"]
    assert part["dropped"]["records"] == 0


def test_a_base_offset_damaged_upwards_is_the_one_skipped(fixture_copy):
    """Batch 15000-15009 claiming 16024 (the next segment's offsets): the batch itself is out
    of order, not the thousands of offsets after it."""
    pytest.importorskip("pyarrow")
    from kafkalog import read_arrow
    directory, path, pos = _flipped(fixture_copy, bit=10)          # 16024
    with pytest.raises(OffsetsOutOfOrderError) as e:
        read_arrow(directory)
    assert (e.value.position, e.value.base_offset) == (pos, 16024)
    offsets = read_arrow(directory, failOnDataLoss=False).column("offset").to_numpy()
    assert len(offsets) == len(np.unique(offsets)) == 29990
    assert [(p["code"], p["offset"]) for p in verify_partition(directory)["problems"]] == \
        [("offsets_not_increasing", 16024)]
    assert salvage_partition(directory).record_count == 29990


def test_every_reader_names_the_batch_damaged_upwards(fixture_copy):
    """The upper bound (the next segment's base offset) in Log.records, iter_batches(path) and
    dump: the error or report names batch 15000-15009 claiming 16024, not the batch after."""
    from kafkalog.dump import DumpReport, dump_partition, dump_segment
    directory, path, pos = _flipped(fixture_copy, bit=10)          # 16024
    with Log.open(directory, read_only=True) as log:
        for read in (lambda: list(log.records(14000)), lambda: list(log.record_tables(14000))):
            with pytest.raises(OffsetsOutOfOrderError) as e:
                read()
            assert (e.value.position, e.value.base_offset) == (pos, 16024)
    with pytest.raises(OffsetsOutOfOrderError) as e:
        list(iter_batches(path))
    assert (e.value.position, e.value.base_offset) == (pos, 16024)
    report = DumpReport()
    dump_segment(path, "none", report=report)
    for problems in (dump_partition(directory, "none")["problems"], report.problems):
        assert [p["position"] for p in problems] == [pos], problems
