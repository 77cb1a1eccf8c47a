"""The Log-level paths users call, checked against brute force: ``Log.read`` (bounded by the
log end, the high watermark, a roll, a truncation), ``Log.offset_for_timestamp`` (each
closed segment's largest timestamp read once per segment list) and ``Log.records``."""
import random

import pytest

from kafkalog import Record, build_batch
from kafkalog.errors import LogClosedError
from kafkalog.log import Log
from kafkalog.records import iter_batches

CONFIG = {"segment.bytes": 4000, "index.interval.bytes": 256}


def _fill(log, n_batches, rng, start_ts=10_000):
    for i in range(n_batches):
        per = rng.randint(1, 6)
        # CreateTime stamps that go back and forth within and between batches
        log.append([Record(key=b"k%d" % rng.randrange(50), value=bytes(rng.randrange(90)),
                           timestamp=start_ts + 10 * i + rng.randrange(-15, 16))
                    for _ in range(per)])


def _all_records(log):
    out = []
    for seg in log.segments:
        for batch in iter_batches(seg.log_path):
            out.extend((r.offset, r.timestamp) for r in batch)
    return out


def _batch_spans(log):
    """[(base offset, last offset, segment base, position, size)] of every batch."""
    spans = []
    for seg in log.segments:
        batches, _, _, _ = seg.batches()
        for b in batches:
            spans.append((int(b["base_offset"]), int(b["last_offset"]), seg.base_offset,
                          int(b["position"]), int(b["size"])))
    return spans


def _expected_read(log, spans, offset, max_bytes, max_offset):
    """Kafka's LocalLog.read by brute force: the first batch holding ``offset`` (or after
    it), up to ``max_bytes`` (the first batch whole), nothing at or past ``max_offset``."""
    for base, last, seg_base, pos, size in spans:
        if last < offset:
            continue
        if base >= max_offset:
            return b""
        seg = next(s for s in log.segments if s.base_offset == seg_base)
        end = max((p + s for b, _, sb, p, s in spans if sb == seg_base and b < max_offset),
                  default=pos)
        return seg.read_bytes(pos, max(0, min(end - pos, max(max_bytes, size))))
    return b""


@pytest.fixture
def log(tmp_path):
    rng = random.Random(17)
    with Log.open(tmp_path / "t-0", CONFIG) as log_:
        _fill(log_, 150, rng)
        yield log_


def test_read_matches_brute_force(log):
    spans = _batch_spans(log)
    assert len(log.segments) > 4
    rng = random.Random(3)
    end = log.log_end_offset
    for offset in [0, end - 1, end] + [rng.randrange(end) for _ in range(300)]:
        for max_bytes in (0, 1, 500, 16384):
            info = log.read(offset, max_bytes)
            assert info.records == _expected_read(log, spans, offset, max_bytes, end), \
                (offset, max_bytes)


def test_read_bounded_by_the_high_watermark(tmp_path):
    rng = random.Random(5)
    with Log.open(tmp_path / "t-0", CONFIG, replicated=True) as log:
        _fill(log, 60, rng)
        spans = _batch_spans(log)
        last_base = spans[-1][0]
        for hwm in (spans[-3][0], last_base, log.segments[-1].base_offset):
            log.update_high_watermark(hwm)
            for offset in range(max(0, hwm - 20), log.log_end_offset):
                info = log.read(offset, 16384, isolation="high_watermark")
                assert info.records == _expected_read(log, spans, offset, 16384, hwm)


def test_read_follows_appends_rolls_and_truncation(tmp_path):
    rng = random.Random(9)
    with Log.open(tmp_path / "t-0", CONFIG) as log:
        for step in range(40):
            _fill(log, rng.randint(1, 8), rng)
            if step % 7 == 3:
                log.roll()
            if step % 9 == 5:
                log.truncate_to(rng.randrange(log.log_start_offset, log.log_end_offset))
            spans = _batch_spans(log)
            end = log.log_end_offset
            assert log.read(end, 16384).records == b""
            for offset in {max(0, end - 3), max(0, end - 1), rng.randrange(end or 1)}:
                assert log.read(offset, 16384).records == \
                    _expected_read(log, spans, offset, 16384, end), (step, offset)


def test_read_only_view_reads_the_same(log, tmp_path):
    log.flush()
    spans = _batch_spans(log)
    with Log.open(log.path, read_only=True) as view:
        for offset in range(0, view.log_end_offset, 7):
            assert view.read(offset, 3000).records == log.read(offset, 3000).records
            assert view.read(offset, 3000).records == \
                _expected_read(log, spans, offset, 3000, view.log_end_offset)


def _expected_for_timestamp(records, ts, start):
    return next(((o, t) for o, t in records if t >= ts and o >= start), None)


def test_offset_for_timestamp_matches_brute_force(log):
    records = _all_records(log)
    stamps = [t for _, t in records]
    rng = random.Random(11)
    targets = [min(stamps) - 1, max(stamps), max(stamps) + 1] + \
        [rng.randint(min(stamps) - 5, max(stamps) + 5) for _ in range(300)]
    for ts in targets:
        assert log.offset_for_timestamp(ts) == _expected_for_timestamp(records, ts, 0), ts
    log.delete_records(records[len(records) // 2][0])
    start = log.log_start_offset
    for ts in targets:
        assert log.offset_for_timestamp(ts) == _expected_for_timestamp(records, ts, start), ts
    assert log.offset_for_timestamp(-2) == (log.log_start_offset, -1)
    assert log.offset_for_timestamp(-1) == (log.log_end_offset, -1)


def test_offset_for_timestamp_sees_new_appends(log):
    late = 10**9
    assert log.offset_for_timestamp(late) is None
    log.append([Record(value=b"late", timestamp=late)])
    assert log.offset_for_timestamp(late) == (log.log_end_offset - 1, late)
    log.roll()                               # the segment it is in is closed now
    log.append([Record(value=b"later", timestamp=late + 5)])
    assert log.offset_for_timestamp(late) == (log.log_end_offset - 2, late)
    assert log.offset_for_timestamp(late + 1) == (log.log_end_offset - 1, late + 5)
    log.truncate_to(log.log_end_offset - 2)
    assert log.offset_for_timestamp(late) is None


def test_offset_for_timestamp_of_compressed_and_log_append_time(tmp_path):
    with Log.open(tmp_path / "t-0", {**CONFIG, "message.timestamp.type": "LogAppendTime"},
                  time_fn=lambda: 50.0) as log:
        log.append([Record(value=b"a", timestamp=1), Record(value=b"b", timestamp=2)])
        assert log.offset_for_timestamp(1) == (0, 50_000)
    with Log.open(tmp_path / "c-0", CONFIG) as log:
        log.append(build_batch([Record(value=b"x", timestamp=t) for t in (5, 9, 7, 12)],
                               compression="gzip"))
        assert log.offset_for_timestamp(8) == (1, 9)
        assert log.offset_for_timestamp(10) == (3, 12)


def test_records_are_the_batches_records(log):
    records = _all_records(log)
    assert [(r.offset, r.timestamp) for r in log.records()] == records
    middle = records[len(records) // 3][0]
    assert [r.offset for r in log.records(middle, middle + 50)] == \
        [o for o, _ in records if middle <= o < middle + 50]
    it = log.records(isolation="bogus")         # lazy, as a generator: raised when iterated
    with pytest.raises(ValueError):
        next(iter(it))


def test_closed_log(log):
    log.close()
    with pytest.raises(LogClosedError):
        log.read(0)
    with pytest.raises(LogClosedError):
        log.offset_for_timestamp(10_000)
    with pytest.raises(LogClosedError):
        list(log.records())
