"""``FileRecords``: a segment's ``.log`` opened on first use, appended to, read, searched and
cut (Kafka's ``FileRecordsTest`` covers the same operations of its class)."""
import os

from kafkalog import Record, build_batch
from kafkalog.config import LogConfig
from kafkalog.file_records import FileRecords
from kafkalog.segment import LogSegment


def batches(n=5):
    out, offset = [], 0
    for i in range(n):
        out.append(build_batch([Record(value=b"v%d" % i, timestamp=1000 + 10 * i)],
                               base_offset=offset))
        offset += 1
    return out


def test_append_read_search_and_truncate(tmp_path):
    segment = LogSegment(tmp_path, 0, LogConfig())
    log_file = FileRecords(str(tmp_path / "x.log"), segment, remote=False, read_only=False)
    assert log_file.size == 0 and os.path.exists(log_file.path)
    data = batches()
    position = 0
    for batch in data:
        log_file.append(batch, position)
        position += len(batch)
    assert log_file.size == position == os.path.getsize(log_file.path)
    assert log_file.read_bytes(0, len(data[0])) == data[0]
    assert bytes(log_file.buffer()) == b"".join(data)
    assert log_file.find_batch(0, 3) == (3 * len(data[0]), len(data[3]))
    assert log_file.find_batch(0, 9)[0] == -1
    assert log_file.search_for_timestamp(1025, 0, 0) == (1030, 3)
    assert log_file.search_for_timestamp(1025, 4, 0) == (1040, 4)
    assert log_file.search_for_timestamp(5000, 0, 0) is None
    log_file.truncate_to(2 * len(data[0]))
    assert log_file.size == os.path.getsize(log_file.path) == 2 * len(data[0])
    assert bytes(log_file.buffer()) == data[0] + data[1]
    log_file.close()
    segment.close_handlers()


def test_opened_on_first_use_and_recovery_reads_a_small_file_whole(tmp_path):
    path = tmp_path / "y.log"
    path.write_bytes(b"".join(batches(3)))
    segment = LogSegment(tmp_path, 0, LogConfig())
    log_file = FileRecords(str(path), segment, remote=False, read_only=True)
    assert not log_file.opened
    assert log_file.recovery_buffer() == path.read_bytes() and not log_file.opened
    log_file.descriptor()
    assert log_file.opened
    log_file.drop_handles()
    assert not log_file.opened and log_file.read_bytes(0, 4) == path.read_bytes()[:4]
    log_file.close()
    segment.close_handlers()
