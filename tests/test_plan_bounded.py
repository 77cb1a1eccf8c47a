"""Bounded reads of a bucket (issue 40): a partition bounded by offsets is planned from the
listing with, per bound, the bytes of its segment (one GET: a segment of one fetch block is
fetched whole by any read, so its offset index would only add a request), not a load of the
partition; by timestamps, the time index of each closed segment (their largest timestamps,
fetched at once), then the bytes of the one holding it. The rows are those the engine's plan of
the local copy reads. read_committed adds the producer snapshot and transaction indexes, also
from the listing."""
import json
import shutil

import pytest

from conftest import FIXTURES

import kafkalog.spark as ks  # noqa: E402
from kafkalog import Record  # noqa: E402
from kafkalog.checkpoint import write_offset_checkpoint  # noqa: E402
from kafkalog.log import Log  # noqa: E402
from kafkalog.scan.planner import partition_offsets  # noqa: E402
from kafkalog.scan.pushdown import Pushdown  # noqa: E402
from kafkalog.scan.reader import read_task  # noqa: E402
from kafkalog.spark.options import Options  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_storage")  # conftest

P = 2
MULTI = FIXTURES / "multiseg-0"         # segments of 2,000 records: those from 22000 on
FIRST = 22000
TXN = FIXTURES / "txn-0"                # transactions, some aborted: segments below 196
TXN_END = 196


def _log_dir(root, source, high_watermark=None):
    """A log dir of ``P`` copies ``t-<i>`` of ``source`` (of multiseg-0 its last four
    segments, of txn-0 its first three: fewer objects to upload); with a high watermark
    checkpoint."""
    def kept(directory, names):
        if directory == str(MULTI):
            return [n for n in names if n[:20].isdigit() and int(n[:20]) < FIRST]
        return [n for n in names if n[:20].isdigit() and int(n[:20]) >= TXN_END]
    for i in range(P):
        shutil.copytree(source, root / f"t-{i}", ignore=kept)
    if high_watermark is not None:
        write_offset_checkpoint(root / "replication-offset-checkpoint",
                                {("t", i): high_watermark for i in range(P)})
    return root


@pytest.fixture(scope="module")
def dirs(s3, tmp_path_factory):
    """{name: (local log dir, its URL)}."""
    if not (MULTI.is_dir() and TXN.is_dir()):
        pytest.skip("no multiseg-0/txn-0 fixtures")
    base = tmp_path_factory.mktemp("bounded")
    made = {"multi": _log_dir(base / "multi", MULTI),
            "multi-hw": _log_dir(base / "multi-hw", MULTI, high_watermark=29000),
            "txn": _log_dir(base / "txn", TXN)}
    return {name: (local, s3.upload(local, f"plan-bounded/{name}"))
            for name, local in made.items()}


def _each(offset):
    return json.dumps({"t": {str(i): offset for i in range(P)}})


def _rows(tasks):
    return sorted((t["partition"], o) for t in tasks
                  for b in read_task(t, ["offset"]) for o in b.column("offset").to_pylist())


def _per_partition(s3_calls):
    """GETs per partition, and the LISTs (the listing's, whatever the partitions)."""
    return s3_calls.get("get_object", 0) / P, s3_calls.get("list_objects_v2", 0)


def _planned(dirs, name, s3, s3_calls, options, pushdown=None):
    """(GETs per partition, LISTs) of planning the bucket's copy, after checking that its
    tasks read the rows the plan of the local copy reads."""
    local, url = dirs[name]
    tasks = ks.plan(url, options, pushdown, storage_options=s3.options)
    cost = _per_partition(s3_calls)
    assert _rows(tasks) == _rows(ks.plan(local, options, pushdown))
    return cost


@pytest.mark.parametrize("name, options, gets", [
    # a start inside a closed segment: its bytes (fetched whole: one block, no index asked)
    ("multi-hw", {"startingOffsets": _each(25000)}, 1),
    # ... without a checkpointed high watermark too: the read ends at the bytes' end
    ("multi", {"startingOffsets": _each(25000)}, 1),
    ("multi", {"endingOffsets": _each(27000)}, 1),
    ("multi", {"startingOffsets": _each(23000), "endingOffsets": _each(27000)}, 2),
], ids=["start", "start-no-hw", "end", "start-end"])
def test_an_offset_bound_costs_an_index_and_its_bytes(dirs, s3, s3_calls, name, options,
                                                      gets):
    per_partition, lists = _planned(dirs, name, s3, s3_calls, options)
    # the checkpoint is one GET for the log dir, not per partition
    assert per_partition == gets + (1 / P if name == "multi-hw" else 0)
    assert lists == 1             # the root's one listing: resolved and discovered


def test_streaming_offsets_need_no_request_per_partition_with_a_high_watermark(dirs, s3,
                                                                               s3_calls):
    for name, gets in (("multi-hw", 1 / P), ("multi", 1)):
        s3_calls.clear()
        local, url = dirs[name]
        remote = partition_offsets(url, Options({}), storage_options=s3.options)
        assert _per_partition(s3_calls) == (gets, 1)
        assert remote == partition_offsets(local, Options({}))


@pytest.mark.parametrize("name, options, gets", [
    # the .timeindex of each closed segment (its last entry: the largest timestamp; three),
    # then the bytes of the one a timestamp is found in (one block: no index asked)
    ("multi", {"startingTimestamp": "1700000025000"}, 4),
    ("multi", {"endingTimestamp": "1700000027000"}, 4),
    ("multi", {"startingOffsetsByTimestamp": _each(1700000025000)}, 4),
    # no record that late: the last segment's bytes are read too (its largest timestamp and
    # its end, latest)
    ("multi", {"startingTimestamp": "9999999999999",
               "startingOffsetsByTimestampStrategy": "latest"}, 4),
    # Kafka's ListOffsets' earliest (-2) is the log start: nothing to read
    ("multi", {"startingTimestamp": "-2"}, 0),
], ids=["start", "end", "by-partition", "none-that-late", "earliest"])
def test_a_timestamp_bound_costs_the_time_indexes_then_an_index_and_its_bytes(
        dirs, s3, s3_calls, name, options, gets):
    per_partition, lists = _planned(dirs, name, s3, s3_calls, options)
    assert (per_partition, lists) == (gets, 1)


def test_a_pushed_timestamp_filter_costs_what_a_starting_timestamp_does(dirs, s3, s3_calls):
    pushdown = Pushdown()
    pushdown.ts_lo = 1700000025000        # timestamp >= it: the plan starts where it points
    # and the log end (the last segment's bytes): a filtered plan asks latest
    assert _planned(dirs, "multi", s3, s3_calls, {}, pushdown) == (4 + 1, 1)


@pytest.mark.parametrize("name, options, gets", [
    # latest is the last stable offset: the log end (the last segment's bytes), the newest
    # producer snapshot below it; then the transaction indexes of the segments read
    ("txn", {}, 4),
    ("txn", {"startingOffsets": _each(150)}, 2),
    # a timestamp's segment, found as without read_committed (time indexes, bytes), and the
    # last stable offset (the last segment's bytes, a snapshot)
    ("multi", {"startingTimestamp": "1700000025000"}, 6),
], ids=["txn", "txn-start", "timestamp"])
def test_read_committed_costs_the_log_end_a_snapshot_and_the_txn_indexes(
        dirs, s3, s3_calls, name, options, gets):
    options = dict(options, **{"kafka.isolation.level": "read_committed"})
    assert _planned(dirs, name, s3, s3_calls, options) == (gets, 1)


def test_a_timestamp_past_the_active_segments_last_time_index_entry_is_found(
        s3, s3_calls, tmp_path):
    """A copy of a live log: the newest batches of its active segment have no time index
    entry yet. A read-only view finds their timestamps as Kafka's recovery of that copy would
    (before: "No offset matched" from the local and the remote plan alike); remotely with one
    GET, the segment's bytes."""
    live = Log.open(tmp_path / "live" / "t-0")
    for i in range(3000):
        live.append([Record(key=b"k", value=b"v" * 50, timestamp=1700000000000 + i)])
    live.flush()
    shutil.copytree(tmp_path / "live", tmp_path / "copy")        # the writer still open
    live.close()
    copy = Log.open(tmp_path / "copy" / "t-0", read_only=True)
    assert copy.segments.active.time_index.last_entry.offset < 2998
    assert copy.offset_for_timestamp(1700000002998)[:1] == (2998,)
    copy.close()
    url = s3.upload(tmp_path / "copy", "plan-bounded/live-copy")
    options = {"startingTimestamp": "1700000002998"}
    tasks = ks.plan(url, options, storage_options=s3.options)
    assert _rows(tasks) == _rows(ks.plan(tmp_path / "copy", options)) == [(0, 2998), (0, 2999)]
    assert s3_calls.get("get_object") == 1


def test_min_partitions_cut_at_batch_starts_reads_each_segment_once(dirs, s3, s3_calls):
    # the listed view, not a load of the partition: each segment's bytes (the cut walks their
    # batches; a default read's end is the bytes' end, so nothing more), the partitions at once
    per_partition, lists = _planned(dirs, "multi", s3, s3_calls, {"minPartitions": "16"})
    assert (per_partition, lists) == (4, 1)
    local, url = dirs["multi"]
    cut = [(t["partition"], t["segment"], t["start_pos"], t["end_pos"])
           for t in ks.plan(url, {"minPartitions": "16"}, storage_options=s3.options)]
    assert len(cut) >= 16 and cut == [(t["partition"], t["segment"], t["start_pos"], t["end_pos"])
                                     for t in ks.plan(local, {"minPartitions": "16"})]
