"""``LazyIndex``: a segment's index opened on first use, checked against the log then, and
rewritten whole (``replace_file``) when rebuilt (Kafka's ``LazyIndexTest`` covers the lazy
opening of its own)."""
import os

from kafkalog import Record
from kafkalog.config import LogConfig
from kafkalog.index import OffsetIndex, TimeIndex
from kafkalog.lazy_index import LazyIndex
from kafkalog.log import Log
from kafkalog.segment import LogSegment


def written_segment(tmp_path, n=30):
    path = tmp_path / "t-0"
    with Log.open(path, {"index.interval.bytes": 64}) as log_:
        for i in range(n):
            log_.append([Record(key=b"k", value=b"v%d" % i, timestamp=1_700_000_000_000 + i)])
    return path


def test_opened_on_first_use_and_dropped_with_the_handles(tmp_path):
    path = written_segment(tmp_path)
    segment = LogSegment(path, 0, LogConfig({"index.interval.bytes": 64}))
    lazy = LazyIndex(segment, OffsetIndex)
    assert lazy.index is None and lazy.path == segment.index_path
    index = lazy.get()
    assert lazy.index is index and index.entries > 0 and lazy.get() is index
    lazy.close_handler()
    lazy.index = None                       # as the descriptor cache's drop does
    assert lazy.get() is not index and lazy.get().entries == index.entries
    lazy.close()
    segment.close()


def test_replace_file_reports_what_it_changed(tmp_path):
    path = written_segment(tmp_path)
    segment = LogSegment(path, 0, LogConfig({"index.interval.bytes": 64}))
    lazy = LazyIndex(segment, TimeIndex)
    data = open(lazy.path, "rb").read()
    entries = len(data) // 12
    assert entries > 1
    assert lazy.replace_file(data) == -1                  # the same entries: untouched
    assert lazy.replace_file(data[:12]) == entries        # entries before, then rewritten
    assert open(lazy.path, "rb").read() == data[:12]
    assert not os.path.exists(lazy.path + ".deleted")
    os.remove(lazy.path)
    assert lazy.replace_file(data) is None                # missing before
    assert open(lazy.path, "rb").read() == data
    segment.close()


def test_rename_to_moves_an_unopened_index_file(tmp_path):
    path = written_segment(tmp_path)
    segment = LogSegment(path, 0, LogConfig())
    lazy = LazyIndex(segment, OffsetIndex)
    old = lazy.path
    lazy.rename_to(old + ".deleted")
    assert not os.path.exists(old) and os.path.exists(old + ".deleted")
    assert lazy.index is None
    segment.close_handlers()
