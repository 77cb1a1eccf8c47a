"""``for r in batch``: one kernel call per uncompressed v2 batch (``batch_records``) gives the
same records, errors and timestamps as the columnar path, on both kernel implementations;
``Record`` fields are plain members; index lookups and record iterators may reuse a result
nobody holds (an int; a record with its int and bytes)."""
import mmap
import pickle
import random
import struct

import numpy as np
import pytest
from crc32c import crc32c

from kafkalog import OffsetIndex, Record, build_batch, build_control_batch, iter_batches
from kafkalog.errors import CorruptRecordError
from kafkalog.records import ControlType, TimestampType, TYPE_OBJECTS

from conftest import FIXTURES, fixture_names


def _logs(name):
    return sorted(p for p in (FIXTURES / name).iterdir() if p.suffix == ".log")


def _fields(r):
    return (r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, r.headers)


@pytest.mark.parametrize("name", [n for n in fixture_names() if not n.startswith("corrupt")])
def test_batch_records_match_the_columnar_path(kernels, name):
    for log in _logs(name):
        data = log.read_bytes()
        for batch in iter_batches(data, validate_crc=False):
            expected = [_fields(r) for r in batch.table().to_records()]
            made = kernels.batch_records(data, batch._row, TYPE_OBJECTS)
            plain = batch.magic == 2 and batch.compression == "none"
            assert (made is not None) == plain, (name, batch)
            if made is not None:
                assert [_fields(r) for r in made] == expected
            fresh = next(iter_batches(data[batch.position:batch.position +
                                           batch.size_in_bytes]))
            assert [_fields(r) for r in fresh] == expected       # the loop users write


def test_log_append_time_and_headers(kernels):
    data = build_batch([Record(key=b"k%d" % i, value=None if i % 3 == 0 else b"v" * i,
                               headers=[("h", b"x"), ("\u00e9", None)] if i % 2 else (),
                               timestamp=1000 + i) for i in range(7)],
                       base_offset=40, timestamp_type="log_append_time")
    row = next(iter_batches(data))._row
    records = list(kernels.batch_records(data, row, TYPE_OBJECTS))
    max_ts = struct.unpack_from(">q", data, 35)[0]
    assert [r.offset for r in records] == list(range(40, 47))
    assert all(r.timestamp == max_ts and r.timestamp_type == TimestampType.LOG_APPEND_TIME
               for r in records)
    assert records[1].headers == (("h", b"x"), ("\u00e9", None)) and records[0].headers == ()
    assert records[0].value is None and records[4].value == b"vvvv"


def _with_crc(batch):
    batch = bytearray(batch)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def _good_then_bad():
    """A sound one-record batch, then a batch whose first record's length runs past its end
    (the CRC made right: only the record check finds it); and the first batch's size."""
    good = build_batch([Record(key=b"a", value=b"b", timestamp=1)], base_offset=0)
    bad = bytearray(build_batch([Record(key=b"k", value=b"v" * 10, timestamp=2)] * 3,
                                base_offset=1))
    bad[61] = 0x7F                          # the first record's length: past the batch's end
    return good + _with_crc(bad), len(good)


def test_a_bad_record_raises_before_any_record_of_its_batch(kernels):
    data, good_size = _good_then_bad()
    batches = list(iter_batches(data))
    assert kernels.batch_records(data, batches[1]._row, TYPE_OBJECTS) is None
    assert [r.offset for r in batches[0]] == [0]
    with pytest.raises(CorruptRecordError) as e:
        iter(batches[1])
    assert e.value.base_offset == 1 and e.value.position == good_size + 61


def test_control_record_with_a_short_key_is_refused(kernels):
    marker = bytearray(build_control_batch(ControlType.COMMIT, producer_id=5,
                                           producer_epoch=0, base_offset=3))
    ok = list(kernels.batch_records(bytes(marker), next(iter_batches(bytes(marker)))._row,
                                    TYPE_OBJECTS))
    assert len(ok) == 1 and len(ok[0].key) == 4
    short = build_batch([Record(key=b"\0", value=b"", timestamp=1)], is_control=True,
                        producer_id=5, producer_epoch=0, transactional=True, base_offset=3)
    row = next(iter_batches(short))._row
    assert kernels.batch_records(short, row, TYPE_OBJECTS) is None
    with pytest.raises(CorruptRecordError):
        list(next(iter_batches(short)))


def test_interleaved_iterators_do_not_share_their_table(kernels):
    data = b"".join(build_batch([Record(key=b"%d-%d" % (b, i), value=b"v", timestamp=i)
                                 for i in range(50)], base_offset=b * 50) for b in range(3))
    rows = [b._row for b in iter_batches(data)]
    its = [kernels.batch_records(data, row, TYPE_OBJECTS) for row in rows]
    seen = [[], [], []]
    for _ in range(50):
        for k, it in enumerate(its):
            seen[k].append(next(it).key)
    assert seen == [[b"%d-%d" % (b, i) for i in range(50)] for b in range(3)]
    assert all(next(it, None) is None for it in its)


def test_a_finished_or_dropped_iteration_lets_the_mmap_close(tmp_path, kernels):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(build_batch([Record(key=b"k", value=b"v", timestamp=i)],
                                          base_offset=i) for i in range(3)))
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    rows = [b._row for b in iter_batches(m)]
    records = list(kernels.batch_records(m, rows[0], TYPE_OBJECTS))     # exhausted
    partial = kernels.batch_records(m, rows[1], TYPE_OBJECTS)
    del partial                                                          # dropped
    m.close()
    assert records[0].key == b"k"        # fields were copied out of the mapping


def test_rows_that_are_not_numpy_voids_are_accepted(kernels):
    data = build_batch([Record(key=b"k", value=b"v", timestamp=1)] * 2, base_offset=9)
    row = next(iter_batches(data))._row
    for given in (row.reshape(1), np.array([row]), row.copy()):
        assert [r.offset for r in kernels.batch_records(data, given, TYPE_OBJECTS)] == [9, 10]
    with pytest.raises(ValueError):
        kernels.batch_records(data, np.array([row, row]), TYPE_OBJECTS)


def test_fetch_records_follows_the_rows_and_hands_the_rest_to_the_fallback(kernels):
    plain = [build_batch([Record(key=b"%d-%d" % (b, i), value=b"v" * i, timestamp=10 * b + i,
                                 headers=[("h", b"%d" % i)] if i % 2 else ())
                          for i in range(4)], base_offset=4 * b) for b in range(3)]
    gzip = build_batch([Record(key=b"z", value=b"zz", timestamp=50)] * 2, base_offset=12,
                       compression="gzip")
    appended = build_batch([Record(key=b"a", value=b"b", timestamp=1)] * 2, base_offset=14,
                           timestamp_type="log_append_time", log_append_time=99)
    data = b"".join(plain) + gzip + appended
    batches = np.array([b._row for b in iter_batches(data)])
    asked = []

    def fallback(i):
        asked.append(i)
        return iter(next(b for k, b in enumerate(iter_batches(data)) if k == i).table())
    rows = np.array([4, 0, 2, 3, 1], np.int64)
    whole = np.array([True, True, False, True, True])
    made = [_fields(r) for r in kernels.fetch_records(data, batches, rows, whole, TYPE_OBJECTS,
                                                      fallback)]
    expected = [_fields(r) for i in rows.tolist()
                for r in list(iter_batches(data))[i].table().to_records()]
    assert made == expected and asked == [2, 3]      # not whole; compressed
    assert made[0][1:3] == (99, TimestampType.LOG_APPEND_TIME)
    assert list(kernels.fetch_records(data, batches, rows[:0], whole[:0], TYPE_OBJECTS,
                                      fallback)) == []
    with pytest.raises(ValueError):
        kernels.fetch_records(data, batches, np.array([5]), np.array([True]), TYPE_OBJECTS,
                              fallback)


def test_fetch_records_raises_the_fallbacks_error_after_the_batches_before(kernels):
    data, _ = _good_then_bad()
    found = list(iter_batches(data))
    it = kernels.fetch_records(data, np.array([b._row for b in found]), np.arange(2),
                               np.ones(2, bool), TYPE_OBJECTS, lambda i: iter(found[i]))
    assert next(it).offset == 0
    with pytest.raises(CorruptRecordError) as e:
        next(it)
    assert e.value.base_offset == 1


def test_record_fields_are_plain_members(kernels):
    r = kernels.Record(key=b"k", value=b"v", timestamp=5, headers=[("a", b"b")])
    assert (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) == \
        (None, 5, 0, b"k", b"v", (("a", b"b"),))
    r.offset, r.key, r.value = 7, b"x", None
    assert (r.offset, r.key, r.value) == (7, b"x", None)
    assert pickle.loads(pickle.dumps(r)) == r and hash(pickle.loads(pickle.dumps(r))) == hash(r)
    assert r != kernels.Record(key=b"x", value=None, timestamp=5, offset=7)   # headers differ
    if not kernels.__name__.endswith("_core_py"):
        with pytest.raises(AttributeError):      # a member is never left empty (NULL)
            del r.key


def test_a_record_or_field_someone_holds_never_changes(kernels):
    # The compiled iterators make a record again in place, with its offset, timestamp, key
    # and value, when the loop has dropped it; what the loop holds must never change.
    base = 1_700_000_000_000                        # ms: two digits of CPython's int
    plain = build_batch([Record(key=b"k%03d" % i, value=b"v" * (i % 3) if i % 4 else None,
                                timestamp=base + i // 2)   # pairs share a timestamp
                         for i in range(40)], base_offset=1000)
    appended = build_batch([Record(key=b"a", value=b"b", timestamp=1)] * 3, base_offset=1040,
                           timestamp_type="log_append_time", log_append_time=base + 7)
    data = plain + appended
    found = list(iter_batches(data))
    expected = [_fields(r) for b in found for r in b.table().to_records()]
    assert [t for _, t, *_ in expected] == [base + i // 2 for i in range(40)] + [base + 7] * 3
    loops = [lambda: (r for b in found for r in b),
             lambda: kernels.fetch_records(data, np.array([b._row for b in found]),
                                           np.arange(2), np.ones(2, bool), TYPE_OBJECTS, None),
             lambda: (r for b in found for r in b.table())]
    for loop in loops:
        seen, records, keyed, held = [], [], {}, {"t": [], "o": [], "k": [], "v": []}
        for i, r in enumerate(loop()):
            # (as text: the loop holds none of its objects)
            seen.append(repr(_fields(r)))
            assert hash(r.key) == hash(bytes(bytearray(r.key)))      # no stale cached hash
            for name, step in (("t", 3), ("o", 5), ("k", 4), ("v", 6)):
                if i % step == 0:
                    held[name].append(getattr(r, {"t": "timestamp", "o": "offset",
                                                  "k": "key", "v": "value"}[name]))
            if i % 7 == 0:
                records.append(r)
            if i % 5 == 0:
                keyed[r.key] = i
        assert seen == [repr(f) for f in expected]
        assert [_fields(r) for r in records] == expected[::7]
        assert held == {name: [f[field] for f in expected[::step]] for name, field, step in
                        (("t", 1, 3), ("o", 0, 5), ("k", 3, 4), ("v", 4, 6))}
        assert keyed == {f[3]: i for i, f in enumerate(expected) if i % 5 == 0}


def test_index_lookup_never_changes_a_result_someone_holds(tmp_path):
    rng = random.Random(3)
    with OffsetIndex(tmp_path / "00000000000000000100.index", 100) as index:
        for i in range(500):
            index.append(100 + 10 * i, 37 * i)
        held = [(t, index.lookup(t)) for t in (rng.randrange(50, 5200) for _ in range(300))]
        for _ in range(1000):
            index.lookup(rng.randrange(50, 5200))        # results dropped: reused
        for target, result in held:
            below = [o for o in range(100, 5100, 10) if o <= target]
            assert result == ((below[-1], 37 * ((below[-1] - 100) // 10)) if below
                              else (100, 0))
            assert type(result).__name__ == "OffsetPosition" and result.offset == result[0]
