"""An index found damaged when a read first opens it (a log loaded after a clean shutdown is
trusted, as Kafka trusts it) is rebuilt from the log, never recovered: a cut of the .log under
the read that holds its mapping would fault the process (SIGBUS) and delete data outside the
loader's report and salvage."""
import os
import struct

from kafkalog import Record
from kafkalog.errors import KafkaLogError
from kafkalog.log import Log


def test_damaged_index_opened_by_a_read_is_rebuilt_without_cutting_the_log(tmp_path):
    path = tmp_path / "t-0"
    with Log.open(path, {"index.interval.bytes": 100}) as log_:
        for i in range(50):
            log_.append([Record(key=b"k", value=b"v%d" % i, timestamp=1_700_000_000_000 + i)])
    log_file = path / "00000000000000000000.log"
    index_file = path / "00000000000000000000.index"
    size = log_file.stat().st_size
    data = bytearray(log_file.read_bytes())
    data[70] ^= 0xFF                       # the first batch's CRC no longer matches
    log_file.write_bytes(bytes(data))
    entries = bytearray(index_file.read_bytes())
    assert len(entries) >= 16
    struct.pack_into(">i", entries, len(entries) - 4, 3)    # last entry: mid-batch
    index_file.write_bytes(bytes(entries))

    log_ = Log.open(path, clean_shutdown=True, recovery_point=50)
    try:
        try:
            for _ in log_.records():
                pass
        except KafkaLogError:
            pass                           # the damaged batch is a typed error for readers
        assert log_file.stat().st_size == size
        assert any(a["action"] == "rebuilt_index" for a in log_.recovery_report)
    finally:
        log_.close()
    # The next unclean recovery cuts the damaged batch, through the loader's report.
    log_ = Log.open(path, clean_shutdown=False, recovery_point=0)
    try:
        assert os.path.getsize(log_file) == 0
        assert any(a["action"] == "truncated" for a in log_.recovery_report)
    finally:
        log_.close()
