"""The read kernels (``_read.pxi``: ``segment_read``, ``find_timestamp``,
``batch_header_plausible``; ``_record.pxi``: ``table_records``) against their pure-Python
twins and against what they replace, on batches embedded at a non-zero position."""
import collections
import random
import struct

import numpy as np
import pytest

from kafkalog import Record, build_batch
from kafkalog._kernels import walk_batches
from kafkalog._layout import OFFSET_KEY, TIME_KEY
from kafkalog.records import TYPE_OBJECTS, decode_batches

from conftest import KERNELS
from test_kernels import both

PAD = b"\xAB" * 37
Pos = collections.namedtuple("Pos", "offset position")
BASE = 1000       # the segment's base offset


def segment(seed=1, n=40):
    """PAD + ``n`` batches of mixed kinds; returns (buffer, [(position, size, base, last)])."""
    rng = random.Random(seed)
    data, rows, offset = bytearray(PAD), [], BASE
    for i in range(n):
        count = rng.randint(1, 8)
        records = [Record(key=b"k%d" % j, value=rng.randbytes(rng.randint(0, 200)),
                          timestamp=1_000 + 10 * i + rng.randint(-15, 15))
                   for j in range(count)]
        kind = rng.random()
        if kind < 0.15:
            batch = build_batch(records, base_offset=offset, compression="gzip")
        elif kind < 0.25:
            batch = build_batch(records, base_offset=offset, timestamp_type="log_append_time",
                                log_append_time=1_000 + 10 * i)
        elif kind < 0.3:
            batch = build_batch(records[:1], base_offset=offset, magic=1)
            count = 1
        else:
            batch = build_batch(records, base_offset=offset)
        rows.append((len(data), len(batch), offset, offset + count - 1))
        data += batch
        offset += count
    return bytes(data), rows


def offset_index(rows, every=3, lie_at=None):
    """An offset index over every ``every``-th batch (``lie_at``: that entry points 5 bytes
    into its batch)."""
    entries = bytearray()
    for i, (pos, _, _, last) in enumerate(rows[::every]):
        entries += struct.pack(">ii", last - BASE, pos + (5 if i == lie_at else 0))
    return bytes(entries)


def views(index_bytes):
    return {impl: mod.IndexView(index_bytes, len(index_bytes) // 8, BASE, OFFSET_KEY, Pos)
            for impl, mod in KERNELS.items()}


def reads(buf, index_bytes, *args):
    out = {impl: KERNELS[impl].segment_read(view, buf, *args)
           for impl, view in views(index_bytes).items()}
    first = next(iter(out.values()))
    assert all(v == first for v in out.values()), (args, out)
    return first


@pytest.mark.parametrize("lie_at", [None, 0, 2])
def test_segment_read_agrees_and_finds_the_batch(lie_at):
    buf, rows = segment()
    index = offset_index(rows, lie_at=lie_at)
    rng = random.Random(7)
    targets = [BASE - 1, BASE, rows[-1][3], rows[-1][3] + 1] + \
        [rng.randrange(BASE, rows[-1][3] + 1) for _ in range(200)]
    for target in targets:
        for max_size, max_position, one in [(0, len(buf), False), (100, len(buf), True),
                                            (100, len(buf), False), (1 << 20, len(buf), True),
                                            (1 << 20, len(buf) - 50, False)]:
            position, size, data, incomplete, _ = reads(buf, index, target, len(PAD), max_size,
                                                           max_position, one)
            want = next(((p, s) for p, s, _, last in rows if last >= target), (-1, 0))
            assert (position, size) == want
            if position < 0:
                assert data is None
                continue
            adjusted = max(max_size, size) if one else max_size
            assert data == (buf[position:position + max(0, min(max_position - position,
                                                                adjusted))]
                            if adjusted else b"")
            assert incomplete == (adjusted != 0 and adjusted < size)
        # a lying entry is reported whenever a lookup lands on it
        if lie_at is not None:
            assert reads(buf, index, rows[::3][lie_at][3], len(PAD), 0, len(buf), False)[4]


def test_segment_read_without_index_and_at_the_edges():
    buf, rows = segment(seed=3)
    for mod in KERNELS.values():
        assert mod.segment_read(None, buf, BASE + 3, len(PAD), 10, len(buf), False)[0] == \
            next(p for p, _, _, last in rows if last >= BASE + 3)
        assert mod.segment_read(None, b"", BASE, 0, 10, 0, True) == (-1, 0, None, False, False)
        # a torn last batch is not returned
        assert mod.segment_read(None, buf[:-1], rows[-1][3], len(PAD), 10, len(buf), True)[0] == -1
        with pytest.raises(ValueError):
            mod.segment_read(None, buf, BASE, -1, 10, len(buf), True)
        view = mod.IndexView(b"", 0, BASE, TIME_KEY, Pos)
        with pytest.raises(ValueError):
            mod.segment_read(view, buf, BASE, 0, 10, len(buf), True)
        view = mod.IndexView(offset_index(rows), 1, BASE, OFFSET_KEY, Pos)
        view.release()
        with pytest.raises(ValueError):
            mod.segment_read(view, buf, BASE, 0, 10, len(buf), True)


def test_index_view_contract_is_the_same_in_both_twins():
    """What kernels read of an IndexView (``_core.pxd``) is public and the same in both
    implementations; a view claiming more entries than its buffer holds is refused."""
    buf, rows = segment(seed=5)
    index = offset_index(rows)
    for mod in KERNELS.values():
        view = mod.IndexView(index, len(index) // 8, BASE, OFFSET_KEY, Pos)
        assert (view.base_offset, view.kind, view.entries) == (BASE, OFFSET_KEY,
                                                               len(index) // 8)
        view.entries += 1
        with pytest.raises(ValueError):
            mod.segment_read(view, buf, BASE, 0, 10, len(buf), True)
        with pytest.raises(ValueError):
            view.lookup(BASE)


def test_batch_header_plausible():
    buf, rows = segment(seed=4)
    pos, size, base, last = rows[5]
    assert both("batch_header_plausible", buf, pos, BASE, last)
    assert not both("batch_header_plausible", buf, pos + 5, BASE, last)
    assert not both("batch_header_plausible", buf, pos, BASE, base - 1)
    assert not both("batch_header_plausible", buf, len(buf) - 3, BASE, last)
    assert not both("batch_header_plausible", buf, -1, BASE, last)
    assert not both("batch_header_plausible", buf[:pos + size - 1], pos, BASE, last)


def search_for_timestamp(buf, rows, start, timestamp, starting_offset):
    """Kafka's searchForTimestamp over the whole batches from ``start``, through the
    columnar decoder: (timestamp, offset) or None."""
    batches = walk_batches(buf, start, validate_crc=False)[0]
    records = decode_batches(buf, batches).records
    hit = np.flatnonzero((records["timestamp"] >= timestamp)
                         & (records["offset"] >= starting_offset))
    return None if not len(hit) else (int(records["timestamp"][hit[0]]),
                                      int(records["offset"][hit[0]]))


def run_find(mod, buf, start, end, timestamp, starting_offset):
    """The loop LogSegment.find_offset_by_timestamp runs around the kernel."""
    while True:
        status, first, second = mod.find_timestamp(buf, start, end, timestamp, starting_offset)
        if status == mod.FIND_TS_FOUND:
            return (first, second)
        if status != mod.FIND_TS_DECODE:
            return None
        batch = walk_batches(buf, first, first + second, validate_crc=False)[0]
        records = decode_batches(buf, batch).records
        hit = np.flatnonzero((records["timestamp"] >= timestamp)
                             & (records["offset"] >= starting_offset))
        if len(hit):
            return (int(records["timestamp"][hit[0]]), int(records["offset"][hit[0]]))
        start = first + second


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_find_timestamp_agrees_with_a_full_decode(seed):
    buf, rows = segment(seed=seed)
    rng = random.Random(seed)
    for _ in range(150):
        timestamp = rng.randint(900, 1500)
        starting_offset = rng.choice([0, rng.randrange(BASE, rows[-1][3] + 2)])
        start = rng.choice(rows)[0] if rng.random() < 0.5 else rows[0][0]
        want = search_for_timestamp(buf, rows, start, timestamp, starting_offset)
        got = {impl: run_find(mod, buf, start, len(buf), timestamp, starting_offset)
               for impl, mod in KERNELS.items()}
        assert all(g == want for g in got.values()), (timestamp, starting_offset, got, want)
        both("find_timestamp", buf, start, len(buf), timestamp, starting_offset)


def test_find_timestamp_stops_at_end_and_at_bad_bytes():
    buf, rows = segment(seed=5)
    pos, size, _, _ = rows[3]
    for mod in KERNELS.values():
        # never past ``end``: the batch running past it asks for more
        assert mod.find_timestamp(buf, rows[0][0], pos + size - 1, 10**9, 0) == \
            (mod.FIND_TS_MORE, pos, 0)
        assert mod.find_timestamp(buf, pos, pos, 0, 0) == (mod.FIND_TS_NONE, pos, 0)
        assert mod.find_timestamp(buf, rows[0][0], len(buf), 10**9, 0)[0] == mod.FIND_TS_NONE
        assert mod.find_timestamp(buf, 0, len(buf), 0, 0) == (mod.FIND_TS_NONE, 0, 0)  # PAD
        with pytest.raises(ValueError):
            mod.find_timestamp(buf, len(buf) + 1, len(buf), 0, 0)


def test_find_timestamp_hands_damaged_records_to_the_caller():
    batch = bytearray(build_batch([Record(key=b"a", value=b"b", timestamp=5)] * 3))
    batch[-1] ^= 0x40        # the last record's header count: its length no longer matches
    buf = PAD + bytes(batch)
    both("find_timestamp", buf, len(PAD), len(buf), 100, 0)     # no candidate: header only
    for mod in KERNELS.values():
        assert mod.find_timestamp(buf, len(PAD), len(buf), 5, 0) == \
            (mod.FIND_TS_DECODE, len(PAD), len(batch))


def test_table_records_are_make_records():
    from test_kernels import sample_batches
    buf = PAD + b"".join(sample_batches(8, seed=9))
    table = decode_batches(buf, walk_batches(buf, len(PAD))[0])
    for mod in KERNELS.values():
        made = mod.make_records(table.data, table.records, table.headers,
                                table.timestamp_type, TYPE_OBJECTS)
        lazily = list(mod.table_records(table.data, table.records, table.headers,
                                        table.timestamp_type, TYPE_OBJECTS))
        assert made == lazily and len(made) == len(table)
        assert [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
                for r in made] == \
            [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
             for r in table.to_records()]
        assert list(mod.table_records(b"", table.records[:0], table.headers[:0],
                                      table.timestamp_type[:0], TYPE_OBJECTS)) == []
        with pytest.raises(ValueError):
            mod.table_records(b"", table.records, table.headers, table.timestamp_type,
                              TYPE_OBJECTS)
    assert [r.offset for r in table] == list(table.records["offset"])
