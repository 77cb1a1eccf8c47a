"""Every kernel in ``KERNEL_NAMES`` and its pure-Python twin, called on the same inputs in one
process (``twins.same``): boundary tables (empty buffer or index, first and last slot, a zeroed
preallocated tail, torn batches, bad CRCs, structural damage), random inputs, and the fuzz
cases of ``test_faults``, each embedded at a non-zero offset so that position arithmetic is
exercised. Results and exceptions (type, position, message) must agree.

``test_every_kernel_has_twin_tests`` keeps the table complete: a kernel added to
``KERNEL_NAMES`` needs a test here marked ``@covers(name)``.
"""
import collections
import functools
import random
import struct

import numpy as np
import pytest

import kafkalog
from kafkalog import _core_py, build_batch, build_control_batch
from kafkalog._kernels import KERNEL_NAMES
from kafkalog.errors import CorruptRecordError
from kafkalog._layout import (
    BATCH_DTYPE, HEADER_DTYPE, OFFSET_KEY, OFFSET_VALUE, TIME_KEY, TIME_VALUE,
)

from twins import compiled_module, same

PAD = b"\xAB" * 37            # batches start at an odd position
TYPES = ("none", "create", "append")     # the type_objects of the record kernels
Pos = collections.namedtuple("Pos", "a b")
COVERED = set()


def covers(*names):
    """Marks a test as the twin test of the kernels ``names``."""
    def mark(test):
        COVERED.update(names)
        return test
    return mark


def at(buf, shift=PAD):
    """``buf`` as a view that starts ``len(shift)`` bytes into a larger buffer."""
    return memoryview(shift + bytes(buf))[len(shift):]


@pytest.fixture(autouse=True, scope="module")
def _the_compiled_module_loaded():
    compiled_module()


def test_every_kernel_has_twin_tests():
    assert set(KERNEL_NAMES) - COVERED == set()
    assert COVERED - set(KERNEL_NAMES) == set()


# --- inputs -----------------------------------------------------------------------------------

def _records(rng, n, start_ts=1_700_000_000_000, keys=True):
    return [kafkalog.Record(key=rng.choice([None, b"", b"k%d" % rng.randrange(8)]) if keys
                            else None,
                            value=rng.choice([None, b"", rng.randbytes(rng.randint(1, 200))]),
                            timestamp=start_ts + rng.randint(-500, 500),
                            headers=[("h\u00e9", rng.choice([None, b"", b"x"]))]
                            * rng.randint(0, 2))
            for _ in range(n)]


@functools.cache
def v2_log():
    """PAD + v2 batches of every kind, offsets increasing; returns (buffer, walked rows)."""
    rng = random.Random(5)
    out, offset = bytearray(PAD), 100
    kinds = ["none", "gzip", "none", "snappy", "lz4", "zstd", "txn", "control", "append_time",
             "compacted", "empty", "none", "epoch"]
    for i, kind in enumerate(kinds):
        recs = _records(rng, rng.randint(1, 9), 1_700_000_000_000 + 1000 * i)
        if kind in ("gzip", "snappy", "lz4", "zstd"):
            batch = build_batch(recs, base_offset=offset, compression=kind)
        elif kind == "txn":
            batch = build_batch(recs, base_offset=offset, producer_id=7, producer_epoch=1,
                                base_sequence=0, transactional=True)
        elif kind == "control":
            batch = build_control_batch("commit", producer_id=7, producer_epoch=1,
                                        base_offset=offset, timestamp=1_700_000_000_000 + 1000 * i)
            recs = recs[:1]
        elif kind == "append_time":
            batch = build_batch(recs, base_offset=offset, timestamp_type="log_append_time",
                                log_append_time=1_700_000_000_000 + 1000 * i)
        elif kind == "compacted":      # offsets with gaps, lastOffsetDelta past the last record
            for j, r in enumerate(recs):
                r.offset = offset + 2 * j
            batch = build_batch(recs, base_offset=offset, last_offset=offset + 2 * len(recs) + 3)
            recs = [None] * (2 * len(recs) + 4)
        elif kind == "empty":          # all records cleaned away, kept for its producer
            batch = build_batch([], base_offset=offset, producer_id=3, producer_epoch=0,
                                base_sequence=5, last_offset=offset + 2)
            recs = [None] * 3
        elif kind == "epoch":
            batch = build_batch(recs, base_offset=offset, partition_leader_epoch=4)
        else:
            batch = build_batch(recs, base_offset=offset)
        out += batch
        offset += len(recs)
    buf = bytes(out)
    return buf, compiled_module().walk_batches(buf, len(PAD))[0]


@functools.cache
def legacy_log():
    """PAD + v0 and v1 entries, plain and compressed wrappers."""
    rng = random.Random(6)
    out, offset = bytearray(PAD), 0
    for magic, codec in [(0, "none"), (1, "none"), (1, "gzip"), (0, "snappy"), (1, "lz4")]:
        recs = _records(rng, 3, keys=True)
        for r in recs:
            r.headers = ()
        out += build_batch(recs, base_offset=offset, magic=magic, compression=codec)
        offset += len(recs)
    buf = bytes(out)
    return buf, compiled_module().walk_batches(buf, len(PAD))[0]


def _damaged(buf, rows):
    """(name, buffer) boundary cases made from a walked ``buf``."""
    first, last = rows[0], rows[-1]
    p, end = int(last["position"]), len(buf)
    yield "whole", buf
    yield "zeroed preallocated tail", buf + bytes(4096)
    for cut in (0, 1, 11, 12, 16, 17, 18, 60, 61, 62, int(last["size"]) // 2,
                int(last["size"]) - 1):
        yield f"torn at {cut}", buf[:p + cut]
    for victim in (first, rows[len(rows) // 2], last):
        at_byte = int(victim["position"]) + int(victim["size"]) - 1
        bad = bytearray(buf)
        bad[at_byte] ^= 0x40
        yield f"bad crc at {at_byte}", bytes(bad)
    q = int(first["position"])
    for size in (-2**31, -1, 0, 13, 14, 21, 48, 2**31 - 1, end):
        bad = bytearray(buf)
        struct.pack_into(">i", bad, q + 8, size)
        yield f"size {size}", bytes(bad)
    for magic in (3, 0x80, 0xFF):
        bad = bytearray(buf)
        bad[int(last["position"]) + 16] = magic
        yield f"magic {magic}", bytes(bad)
    yield "garbage between", buf[:p] + b"\x00\x01garbage!" + buf[p:]


@functools.cache
def cases():
    """Boundary buffers, random bytes and fuzzed copies, every one with PAD in front."""
    out = [("empty", b""), ("pad only", PAD)]
    for name, (buf, rows) in (("v2", v2_log()), ("legacy", legacy_log())):
        out += [(f"{name}: {what}", b) for what, b in _damaged(buf, rows)]
    rng = random.Random(11)
    out += [(f"random {n}", PAD + rng.randbytes(n)) for n in (1, 16, 17, 61, 200, 1000)]
    pool = [bytes(buf[int(r["position"]):int(r["position"] + r["size"])])
            for buf, rows in (v2_log(), legacy_log()) for r in rows]
    for seed in range(8):       # batches of every kind in random order, some cut short
        picked = b"".join(rng.choice(pool) for _ in range(rng.randint(1, 10)))
        out.append((f"random batches {seed}", PAD + picked[:len(picked) - rng.choice(
            [0, 0, 1, rng.randrange(len(picked))])]))
    return out


def fuzzed(n, seed):
    """``n`` copies of Kafka-written seed logs damaged by ``test_faults.mutate``, after PAD."""
    from test_faults import SEEDS, mutate           # reads the Kafka-written fixtures
    rng = random.Random(seed)
    return [PAD + mutate(rng.choice(SEEDS), rng) for _ in range(n)]


def starts(buf):
    return sorted({0, len(PAD), min(len(PAD) + 1, len(buf)), len(buf)} & set(range(len(buf) + 1)))


# --- walking, finding, resyncing --------------------------------------------------------------

def walk_all(buf, what):
    for start in starts(buf):
        for end in {-1, max(start, len(buf) - 7)}:
            for crc, stop in ((True, False), (True, True), (False, False)):
                same(lambda k: k.walk_batches(at(buf), start, end, crc, stop),
                     f"{what} walk {start} {end} {crc} {stop}")
    for most in (0, 1, 3):
        same(lambda k: k.walk_batches(at(buf), 0, -1, True, True, most), f"{what} max {most}")
    same(lambda k: k.walk_batches(buf, len(buf) + 1), f"{what} start past the end")
    same(lambda k: k.walk_batches(buf, len(buf), len(buf) - 1), f"{what} end before start")
    same(lambda k: k.walk_batches(buf, -1), f"{what} negative start")


@covers("walk_batches")
def test_walk_batches():
    for what, buf in cases():
        walk_all(buf, what)


@covers("find_batch", "next_valid_batch", "batch_header_plausible")
def test_find_batch_next_valid_batch_and_header_plausible():
    for what, buf in cases():
        rows = compiled_module().walk_batches(buf, min(len(PAD), len(buf)), -1, False)[0]
        targets = {-1, 0, 2**63 - 1} | {int(r["base_offset"]) + d for r in rows for d in (-1, 0)}
        targets |= {int(r["last_offset"]) + d for r in rows for d in (0, 1)}
        positions = {-1, 0, len(PAD), len(buf), len(buf) - 17} | {
            int(r["position"]) + d for r in rows for d in (-1, 0, 1)}
        for start in starts(buf):
            for target in sorted(targets):
                same(lambda k: k.find_batch(at(buf), start, -1, target), f"{what} find {target}")
            same(lambda k: k.find_batch(at(buf), start, len(buf) - 20, 10**6), f"{what} end")
            for legacy in (True, False):
                same(lambda k: k.next_valid_batch(at(buf), start, -1, legacy), f"{what} resync")
                same(lambda k: k.next_valid_batch(at(buf), start, len(buf) - 3, legacy), what)
        for position in sorted(positions):
            for base, offset in ((0, 2**62), (100, 100), (int(rows[0]["base_offset"]) + 1
                                                         if len(rows) else 5, 10**6)):
                same(lambda k: k.batch_header_plausible(at(buf), position, base, offset),
                     f"{what} plausible {position}")
    same(lambda k: k.find_batch(b"abc", 4, -1, 0), "find: start past the end")
    same(lambda k: k.next_valid_batch(b"abc", -1), "resync: negative start")


# --- decoding and records ---------------------------------------------------------------------

def _regions(rows):
    v2 = rows[(rows["magic"] == 2) & ((rows["attributes"] & 0x07) == 0)]
    starts_ = (v2["position"] + 61).astype(np.int64)
    ends = (v2["position"] + v2["size"]).astype(np.int64)
    return (starts_, ends, v2["base_offset"].astype(np.int64),
            v2["base_timestamp"].astype(np.int64), v2["record_count"].astype(np.int64),
            v2["last_offset"].astype(np.int64))


def decode_all(buf, what):
    rows = compiled_module().walk_batches(buf, min(len(PAD), len(buf)), -1, False)[0]
    for records in (True, False):
        same(lambda k: k.check_batches(at(buf), rows, records), f"{what} check {records}")
    region = _regions(rows)
    same(lambda k: k.decode_v2_records(at(buf), *region), f"{what} decode v2")
    same(lambda k: k.decode_v2_records(at(buf), *region[:5]), f"{what} decode v2, no last")
    for i in range(len(region[0])):
        one = tuple(a[i:i + 1] for a in region)
        same(lambda k: k.decode_v2_records(at(buf), *one), f"{what} decode region {i}")
    plain_v2 = rows[(rows["magic"] == 2) & ((rows["attributes"] & 0x07) == 0)]
    same(lambda k: k.decode_v2_offsets(at(buf), plain_v2), f"{what} offsets")
    for i in range(len(plain_v2)):
        same(lambda k: k.decode_v2_offsets(at(buf), plain_v2[i:i + 1]), f"{what} offsets {i}")
    same(lambda k: k.decode_v2_offsets(at(buf), rows), f"{what} offsets of every row")
    legacy = rows[rows["magic"] < 2]
    same(lambda k: k.decode_legacy_records(at(buf), legacy), f"{what} decode legacy")
    for i in range(len(rows)):
        same(lambda k: k.batch_records(at(buf), rows[i], TYPES), f"{what} batch {i}")
        same(lambda k: k.batch_records(at(buf), rows[i:i + 1], TYPES), f"{what} batch {i}")
    # every batch, backwards, every third one handed to the fallback (a refused one too)
    order = np.arange(len(rows))[::-1]
    same(lambda k: k.fetch_records(at(buf), rows, order, order % 3 != 0, TYPES,
                                   lambda i: iter([("fallback", i)])), f"{what} fetch")
    return rows, region


@covers("check_batches", "decode_v2_records", "decode_v2_offsets", "decode_legacy_records",
        "batch_records", "fetch_records")
def test_check_and_decode():
    for what, buf in cases():
        decode_all(buf, what)


def test_offsets_are_those_of_the_decoded_records():
    """``decode_v2_offsets``: the offsets and timestamps a consumer sees (LogAppendTime,
    compacted and empty batches), as ``decode_batches`` decodes them."""
    from kafkalog.records import decode_batches
    buf, rows = v2_log()
    plain_v2 = rows[(rows["magic"] == 2) & ((rows["attributes"] & 0x07) == 0)]
    table = decode_batches(buf, plain_v2)
    for k in (compiled_module(), _core_py):
        offsets, timestamps = k.decode_v2_offsets(buf, plain_v2)
        assert offsets.tolist() == table.records["offset"].tolist()
        assert timestamps.tolist() == table.records["timestamp"].tolist()


@covers("BatchView", "batch_views")
def test_batch_views():
    def views(k, buf, rows, finish=lambda: None):
        return [(type(b).__name__, b.is_valid(), b._row.tolist(), b._path, b._table, b._checked)
                for b in k.batch_views(k.BatchView, lambda: (at(buf), rows, "p", finish))]
    for what, buf in cases():
        for crc in (True, False):
            rows = compiled_module().walk_batches(buf, min(len(PAD), len(buf)), -1, crc)[0]
            same(lambda k: views(k, buf, rows), f"{what} views, crc {crc}")
            for i in range(len(rows)):
                same(lambda k: k.BatchView(at(buf), rows[i], "p").is_valid(), f"{what} {i}")
                same(lambda k: k.BatchView(at(buf), rows[i], None, 0).is_valid(), f"{what} {i}")
    rows = compiled_module().walk_batches(v2_log()[0])[0]

    def bad():
        raise CorruptRecordError("the walk's error", position=3)
    same(lambda k: views(k, v2_log()[0], rows, bad), "finish raises after the last")
    same(lambda k: views(k, v2_log()[0], rows[:0], bad), "no batches, finish raises")
    same(lambda k: k.BatchView(v2_log()[0], rows[:2]), "two rows")
    made = collections.namedtuple("Made", "buffer row path")         # any class, called
    same(lambda k: [(m.row.tolist(), m.path) for m in k.batch_views(
        made, lambda: (v2_log()[0], rows, "p", lambda: None))], "another class")


@covers("make_records", "table_records", "span_bytes", "gather_spans")
def test_records_from_decoded_columns():
    for buf, rows in (v2_log(), legacy_log()):
        if (rows["magic"] == 2).any():
            records, headers = compiled_module().decode_v2_records(buf, *_regions(rows))
        else:
            records = compiled_module().decode_legacy_records(buf, rows)
            headers = np.zeros(0, HEADER_DTYPE)
        types_ = np.array([-1, 0, 1] * len(records), np.int8)[:len(records)]
        for fn in ("make_records", "table_records"):
            same(lambda k: getattr(k, fn)(at(buf), records, headers, types_, TYPES), fn)
            same(lambda k: getattr(k, fn)(at(buf), records[:0], headers, types_[:0], TYPES), fn)
            same(lambda k: getattr(k, fn)(at(buf), records, headers, types_[:-1], TYPES), fn)
            cut = at(buf[:int(records["value_pos"].max())])       # spans past the buffer
            same(lambda k: getattr(k, fn)(cut, records, headers, types_, TYPES), f"{fn} cut")
        for field in ("key", "value"):
            pos = records[f"{field}_pos"].astype(np.int64)
            length = records[f"{field}_len"].astype(np.int32)
            same(lambda k: k.span_bytes(at(buf), pos, length), f"span_bytes {field}")
            same(lambda k: k.gather_spans(at(buf), pos, length), f"gather_spans {field}")
            same(lambda k: k.span_bytes(at(buf), pos, length[:-1]), "span_bytes lengths")
            same(lambda k: k.gather_spans(at(buf), pos, length[:-1]), "gather_spans lengths")
    outside = (np.array([0, 5, -3], np.int64), np.array([2, 0, 1], np.int32))
    for fn in ("span_bytes", "gather_spans"):
        same(lambda k: getattr(k, fn)(at(b"abcdef"), *outside), f"{fn} outside")
        same(lambda k: getattr(k, fn)(b"", np.zeros(0, np.int64), np.zeros(0, np.int32)), fn)
        same(lambda k: getattr(k, fn)(b"abc", np.array([1, 3], np.int64),
                                      np.array([-1, 0], np.int32)), f"{fn} null and empty")


@covers("chained")
def test_chained():
    for parts in ([], [[]], [[1, 2], [], [3]], ["ab", (), "c"]):
        same(lambda k: list(k.chained(iter(list(parts)))), f"chained {parts!r}")

    def failing():
        yield [1]
        raise CorruptRecordError("the source's error", position=3)
    same(lambda k: list(k.chained(failing())), "the source raises")
    for k in (compiled_module(), _core_py):          # a second caller mid-next
        def inner():
            yield 1
            try:
                next(it)
            except ValueError as e:
                yield str(e)
        it = k.chained(iter([inner(), [2]]))
        got = list(it)
        assert got[0] == 1 and "already executing" in got[1] and got[2:] == [2], (k, got)


@covers("Record")
def test_record_objects():
    made = [dict(), dict(key=b"k", value=b"v"), dict(key=None, value=None, timestamp=5),
            dict(key=b"", value=b"", headers=[("a", b"1"), ("b", None)], offset=7,
                 timestamp_type=1),
            dict(value=b"x" * 100, timestamp=-1, headers=())]

    def fields(k):
        out = []
        for kwargs in made:
            r = k.Record(**kwargs)
            twin = k.Record(**kwargs)
            out.append((r, repr(r), r == twin, r != twin, hash(r) == hash(twin),
                        r == k.Record(key=b"other"), r.__eq__("not a record")))
            r.value, r.offset = b"changed", 9       # plain, writable members
            out.append((r.value, r.offset))
        out.append(k.Record(b"pk", b"pv", 3, [("h", b"v")], 4, 0))   # positional order
        return out
    same(fields, "Record")


# --- index kernels ----------------------------------------------------------------------------

def _index(n, seed, entry):
    """An index of ``n`` increasing entries (``entry`` 8: offset, 12: time) and its keys."""
    rng = random.Random(seed)
    keys = sorted(rng.sample(range(1, 40 * n + 50), n))
    values = sorted(rng.sample(range(1, 40 * n + 50), n))
    if entry == 8:
        return b"".join(struct.pack(">ii", a, b) for a, b in zip(keys, values)), keys, values
    return b"".join(struct.pack(">qi", a, b) for a, b in zip(keys, values)), keys, values


def index_tables():
    """(what, buffer, entries, entry size, keys, values): empty, tiny, around the warm
    section (1024 offset / 682 time entries), a zeroed preallocated tail, random garbage."""
    for entry in (8, 12):
        for n in (0, 1, 2, 3, 681, 682, 683, 1023, 1024, 1025, 1500):
            buf, keys, values = _index(n, n, entry)
            yield f"{entry}/{n}", buf, n, entry, keys, values
            if n in (1, 3, 1025):
                yield f"{entry}/{n} + zero tail", buf + bytes(entry * 50), n + 50, entry, \
                    keys, values
        garbage = random.Random(entry).randbytes(entry * 300)
        yield f"{entry} garbage", garbage, 300, entry, [0, 2**31], [0]
    # keys whose int64 difference overflows: the interpolated guess once left the index
    extreme = [-2**63] + [0] * 38 + [2**63 - 1]
    yield "12 extreme", b"".join(struct.pack(">qi", t, 0) for t in extreme), 40, 12, \
        [-2**63 + 1, 2**62, 2**63 - 2], [0]


@covers("index_search", "index_search_many", "index_lookup", "index_entries",
        "index_valid_entries")
def test_index_kernels():
    for what, buf, n, entry, keys, values in index_tables():
        fields = (OFFSET_KEY, OFFSET_VALUE) if entry == 8 else (TIME_KEY, TIME_VALUE)
        for field, col in zip(fields, (keys, values)):
            targets = [-2**31, 0, min(col) - 1 if col else 0, 2**31 - 1] + \
                [c + d for c in (col[:2] + col[-2:]) for d in (-1, 0, 1)] + \
                random.Random(n).sample(range(0, 40 * n + 60), 40)
            targets = [t for t in targets if -2**63 <= t < 2**63]      # int64 arguments
            for upper in (False, True):
                for t in targets:
                    slot = same(lambda k: k.index_search(at(buf), n, field, t, upper), what)
                    assert slot[0] != "ok" or -1 <= slot[1] < max(n, 1), (what, t, slot)
                    same(lambda k: k.index_lookup(at(buf), n, field, t, upper), what)
                same(lambda k: k.index_search_many(at(buf), n, field,
                                                   np.array(targets, np.int64), upper), what)
        same(lambda k: k.index_entries(at(buf), n, fields[0]), what)
        same(lambda k: k.index_valid_entries(at(buf), entry), what)
        same(lambda k: k.index_valid_entries(at(buf[:len(buf) - 3]), entry), f"{what} cut")
    for k_args in ((b"\0" * 16, 3, OFFSET_KEY, 0), (b"\0" * 16, -1, OFFSET_KEY, 0),
                   (b"\0" * 16, 1, 7, 0), (b"", 0, TIME_VALUE, 5)):
        same(lambda k: k.index_search(*k_args), f"arguments {k_args[1:]}")
        same(lambda k: k.index_lookup(*k_args), f"arguments {k_args[1:]}")
    same(lambda k: k.index_entries(b"\0" * 16, 2, OFFSET_VALUE), "entries of a value field")
    same(lambda k: k.index_valid_entries(b"\0" * 16, 0), "entry size 0")


@covers("IndexView", "index_lookup_many")
def test_index_views():
    for what, buf, n, entry, keys, _ in index_tables():
        kind = OFFSET_KEY if entry == 8 else TIME_KEY
        base = 1000 if kind == OFFSET_KEY else 77
        targets = [-1, 0, base - 1, base, 2**40] + [base + c + d for c in keys[:2] + keys[-2:]
                                                      for d in (-1, 0, 1)] + \
            [c + d for c in keys[:2] + keys[-2:] for d in (-1, 0, 1)]
        targets = [t for t in targets if -2**63 <= t < 2**63]

        def lookups(k):
            view = k.IndexView(at(buf), n, base, kind, Pos)
            got = [view.lookup(t) for t in targets] + [view.entries, view.base_offset,
                                                        view.kind]
            view.release()
            view.release()                          # twice: nothing left to release
            got.append(view.entries)
            got.append(outcome_of(lambda: view.lookup(base)))
            return got + [type(g).__name__ for g in got[:3]]
        same(lookups, f"{what} view")
        same(lambda k: k.index_lookup_many(at(buf), n, kind, base, np.array(targets, np.int64)),
             f"{what} lookup_many")
    same(lambda k: k.IndexView(b"\0" * 8, 1, 0, OFFSET_VALUE, Pos), "view of a value field")
    same(lambda k: k.index_lookup_many(b"\0" * 8, 1, TIME_VALUE, 0, np.zeros(1, np.int64)),
         "lookup_many of a value field")
    same(lambda k: k.index_lookup_many(b"\0" * 8, 2, OFFSET_KEY, 0, np.zeros(1, np.int64)),
         "lookup_many entries past the buffer")


def outcome_of(fn):
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - compared between the two modules
        return ("raise", type(e), str(e))


# --- scans ------------------------------------------------------------------------------------

@covers("index_entries_for", "recovery_summary")
def test_scan_kernels():
    for what, buf in cases():
        rows = compiled_module().walk_batches(buf, min(len(PAD), len(buf)), -1, False)[0]
        for interval in (0, 1, 100, 4096):
            for start in (0, 100):
                same(lambda k: k.index_entries_for(rows, interval, start), what)
            for state in ((0, -1, -1, -1), (50, 1_700_000_000_500, 3, 1_700_000_000_000),
                          (5000, 2**62, 9, 2**62)):
                same(lambda k: k.index_entries_for(rows, interval, 64, *state),
                     f"{what} {state}")
            for base in (0, 100, 101, int(rows["last_offset"].max()) if len(rows) else 7,
                         -2**31):
                same(lambda k: k.recovery_summary(rows, base, interval), f"{what} {base}")
    far = np.zeros(2, dtype=BATCH_DTYPE)
    far["last_offset"] = [5, 2**40]
    far["size"] = 80
    same(lambda k: k.recovery_summary(far, 0, 10), "an offset too far from the base")


# --- append -----------------------------------------------------------------------------------

def _append_inputs():
    rng = random.Random(9)
    plain = b"".join(build_batch(_records(rng, rng.randint(1, 6)), base_offset=10 * i,
                                 partition_leader_epoch=i % 3) for i in range(6))
    compressed = build_batch(_records(rng, 4), base_offset=60, compression="gzip")
    producer = build_batch(_records(rng, 2), base_offset=70, producer_id=5, producer_epoch=0,
                           base_sequence=0)
    yield "plain", plain
    yield "mixed", plain + compressed + producer
    yield "empty", b""
    yield "short tail", plain + b"\0" * 10
    yield "torn", plain[:-5]
    yield "zeroed tail", plain + bytes(200)
    rows = compiled_module().walk_batches(plain)[0]
    second = int(rows["position"][1])
    bad = bytearray(plain)
    bad[second + 70] ^= 1
    yield "bad crc", bytes(bad)
    bad = bytearray(plain)
    bad[second + 16] = 1
    yield "magic 1", bytes(bad)
    bad = bytearray(plain)
    struct.pack_into(">i", bad, second + 8, 30)
    yield "small", bytes(bad)
    yield "not increasing", plain + plain
    records_bad = bytearray(build_batch(_records(rng, 3), base_offset=0))
    struct.pack_into(">i", records_bad, 57, 9)
    yield "record count", _reseal(records_bad)
    delta_bad = bytearray(build_batch(_records(rng, 3), base_offset=0))
    struct.pack_into(">i", delta_bad, 23, -1)
    yield "negative delta", _reseal(delta_bad)
    yield "legacy", build_batch(_records(rng, 2), magic=1)


def _reseal(batch):
    from crc32c import crc32c
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


@covers("prepare_append")
def test_prepare_append():
    for what, data in _append_inputs():
        for assign in (-1, 0, 1000):
            for limit in (1 << 20, 200):
                for append_time in (-1, 1_800_000_000_000):
                    def call(k):
                        buf = bytearray(data)
                        return k.prepare_append(buf, assign, limit, append_time), bytes(buf)
                    same(call, f"{what} {assign} {limit} {append_time}")


@covers("build_v2_batch")
def test_build_v2_batch():
    """Records of every shape (None / empty / buffer keys and values, str and bytes header
    keys, own offsets and timestamps or none), each header option, and what must raise."""
    import array
    from kafkalog import codecs
    rng = random.Random(29)

    def records(k, n):
        out = []
        for i in range(n):
            out.append(k.Record(
                key=rng.choice([None, b"", b"k%d" % i, bytearray(b"ba"), memoryview(b"mv")]),
                value=rng.choice([None, b"", rng.randbytes(rng.randint(1, 300)),
                                  array.array("i", [1, 2, 3])]),
                timestamp=rng.choice([None, 1_700_000_000_000 + rng.randint(-10**6, 10**6)]),
                headers=rng.choice([(), [("h\u00e9", b"v")], [(b"raw", None), ("e", b"")]]),
                offset=rng.choice([None, None, 1000 + 3 * i])))
        return out
    for seed in range(12):
        n = rng.choice([0, 1, 2, 7, 60])
        state = rng.getstate()
        for options in ({}, {"delete_horizon_ms": 1_800_000_000_000},
                        {"last_offset": 5000, "max_timestamp": 42},
                        {"compress": functools.partial(codecs.compress, codecs.GZIP)}):
            def call(k):
                rng.setstate(state)
                return k.build_v2_batch(records(k, n), 1000, 1_700_000_000_123,
                                        rng.choice([0, 0x08, 0x10, 0x20, 0x40]), 7, 2, 11, 4,
                                        **options)
            kind, built = same(call, f"build {seed} {n} {options}")
            assert kind == "ok"
            rows, status = compiled_module().walk_batches(bytes(built))[:2]
            assert status == 0 and len(rows) == 1 and rows["crc_valid"][0] == 1
    same(lambda k: k.build_v2_batch([(b"k", b"v", 5), {"key": None, "value": b"x"}], 0, 9, 0,
                                    -1, -1, -1, -1), "tuples and dicts")
    same(lambda k: k.build_v2_batch(iter([k.Record(value=b"g")]), 3, 9, 0, -1, -1, -1, -1),
         "an iterator")
    for bad in ([5], [object()], [None]):
        same(lambda k: k.build_v2_batch(bad, 0, 0, 0, -1, -1, -1, -1), f"not records {bad}")
    for field in ({"key": "text"}, {"value": 12},
                  {"headers": [(None, b"v")]}, {"headers": [(5, b"v")]}):
        same(lambda k: k.build_v2_batch([k.Record(**field)], 0, 0, 0, -1, -1, -1, -1),
             f"bad field {field}")


@covers("as_record")
def test_as_record():
    for item in ((b"k", b"v", 5), {"key": None, "value": b"x", "headers": [("h", b"")]}, 5,
                 None, "text"):
        same(lambda k: k.as_record(item), f"as_record {item!r}")
    same(lambda k: k.as_record(k.Record(value=b"r", offset=3)), "a Record")


def _appender_scenario(k, path):
    """Log.append of one or two Records or a batch's bytes a call through ``k``'s kernels:
    index entries, rolls by size and by index, new leader epochs, every fast case and those it
    leaves to the general path (tuples, own offsets, producer ids, two batches, compressed or
    corrupt bytes)."""
    from twins import kernels_of
    with kernels_of(k):
        log = kafkalog.Log.open(path, {"segment.bytes": 9000, "index.interval.bytes": 400,
                                       "segment.index.bytes": 120},
                                time_fn=lambda: 1_700_000_000.25)
        out, fast = [], 0
        for i in range(400):
            records = [k.Record(key=b"k%d" % i, value=b"v" * (i % 90),
                                timestamp=None if i % 7 == 0 else 1_700_000_000_000 + i,
                                headers=[("h", b"x")] if i % 5 == 0 else ())] * (1 + (i % 13 == 0))
            if i % 50 == 49:
                records = [(b"tuple", b"v")] if i % 100 == 49 else [k.Record(offset=3)]
            elif i % 4 == 1:        # one batch's bytes; two batches, compressed, corrupt
                batch = build_batch([k.Record(value=b"b%d" % i, timestamp=1_700_000_000_000 + i)],
                                    partition_leader_epoch=i // 140,
                                    compression="gzip" if i % 36 == 9 else "none")
                records = batch + batch if i % 36 == 5 else bytearray(batch)
                if i % 36 == 13:
                    records[-1] ^= 1
            fast += log._local.appender is not None
            kwargs = {"producer_id": 9 + i, "producer_epoch": 0, "base_sequence": 0} \
                if i % 61 == 60 else {}
            try:
                out.append(tuple(log.append(records, partition_leader_epoch=i // 150,
                                            **kwargs)))
            except kafkalog.errors.CorruptRecordError as e:
                out.append(str(e))
            segment = log.active_segment
            out.append((log.log_end_offset, log.high_watermark, tuple(log._local.log_end_metadata),
                        segment.size, segment.bytes_since_last_index_entry,
                        segment.max_timestamp_so_far, segment.offset_of_max_timestamp_so_far))
        out.append((len(log.segments), log.leader_epoch_cache.entries, fast > 300))
        log.close()
    return out, {f.name: f.read_bytes() for f in sorted(path.iterdir())}


@covers("ActiveSegmentAppender")
def test_active_segment_appender(tmp_path):
    same(lambda k: _appender_scenario(k, tmp_path / f"{k.__name__}-0"), "appends")


# --- compaction -------------------------------------------------------------------------------

@covers("crc32c")
def test_crc32c():
    rng = random.Random(17)
    for n in list(range(0, 40)) + [255, 256, 257, 767, 768, 769, 8191, 8192, 24577, 100_003]:
        data = rng.randbytes(n)
        for shift in (b"", b"x", PAD):
            same(lambda k: k.crc32c(at(data, shift)), f"crc32c {n}")
            seed = rng.getrandbits(32)
            same(lambda k: k.crc32c(at(data, shift), seed), f"crc32c {n} seeded")
    same(lambda k: k.crc32c(bytearray(b"abc")), "crc32c of a bytearray")


@covers("key_hash", "offset_map_put", "offset_map_get")
def test_offset_map():
    rng = random.Random(23)
    for n in list(range(0, 50)) + [255, 4096]:
        key = rng.randbytes(n)
        same(lambda k: k.key_hash(at(key)), f"key_hash {n}")
    buf, rows = v2_log()
    table = compiled_module().decode_v2_records(buf, *_regions(rows))[0]
    for capacity, limit in ((8, 8), (8, 3), (64, 40), (4, 0)):
        for seed in range(3):
            use = np.array([random.Random(seed * 7 + i).random() < 0.8
                            for i in range(len(table))], np.uint8)

            def fill(k):
                slots = np.zeros((capacity, 3), np.uint64)
                first = k.offset_map_put(slots, 0, limit, at(buf), table, use)
                again = k.offset_map_put(slots, first[0], limit, at(buf), table[::-1].copy(),
                                         use[::-1].copy())
                return first, again, slots, k.offset_map_get(slots, at(buf), table)
            same(fill, f"offset map {capacity} {limit} {seed}")
    same(lambda k: k.offset_map_put(np.zeros((8, 3), np.uint64), 0, 8, buf, table, use[:-1]),
         "use of the wrong length")


@covers("compact_batches")
def test_compact_batches():
    buf, rows = v2_log()
    plain = rows[((rows["attributes"] & 0x07) == 0)]
    records = int(plain["record_count"].sum())
    for seed in range(8):
        rng = random.Random(seed)
        keep = np.array([rng.random() < 0.6 for _ in range(records)], np.uint8)
        action = np.array([rng.choice([0, 1, 2, 2]) for _ in plain], np.int8)
        horizon = np.array([rng.choice([-1, -1, 1_700_000_100_000]) for _ in plain], np.int64)
        same(lambda k: k.compact_batches(at(buf), plain, keep, action, horizon), f"{seed}")
        same(lambda k: k.compact_batches(at(buf), plain, keep[:-1], action, horizon), "keep")
        same(lambda k: k.compact_batches(at(buf), plain, keep, action[:-1], horizon), "action")
    same(lambda k: k.compact_batches(buf, rows, np.zeros(500, np.uint8),
                                     np.zeros(len(rows), np.int8),
                                     np.full(len(rows), -1, np.int64)), "compressed rows")


# --- the reads users call ---------------------------------------------------------------------

def _offset_index(rows, base, lie_at=None, every=2):
    out = bytearray()
    for i, r in enumerate(rows[::every]):
        out += struct.pack(">ii", int(r["last_offset"]) - base,
                           int(r["position"]) + (5 if i == lie_at else 0))
    return bytes(out)


@covers("segment_read")
def test_segment_read():
    for buf, rows in (v2_log(), legacy_log()):
        base = int(rows["base_offset"][0])
        offsets = sorted({base - 1, base, int(rows["last_offset"][-1]) + 1, 10**9} |
                         {int(r["base_offset"]) + d for r in rows for d in (0, 1)} |
                         {int(r["last_offset"]) for r in rows})
        for index in (None, _offset_index(rows, base), _offset_index(rows, base, lie_at=1),
                      b""):
            for offset in offsets:
                for start, max_size, max_position, min_one in (
                        (0, 1 << 20, len(buf), False), (len(PAD), 0, len(buf), True),
                        (len(PAD), 100, len(buf), False), (len(PAD), 100, len(buf), True),
                        (200, 1 << 20, len(buf) - 50, True), (len(buf) + 10, 10, len(buf), True),
                        (-1, 10, len(buf), True)):
                    def read(k):
                        view = None if index is None else \
                            k.IndexView(index, len(index) // 8, base, OFFSET_KEY, Pos)
                        return k.segment_read(view, at(buf), offset, start, max_size,
                                              max_position, min_one)
                    same(read, f"segment_read {offset} {start} {max_size}")
    same(lambda k: k.segment_read(k.IndexView(b"", 0, 0, TIME_KEY, Pos), b"", 0, 0, 1, 1, True),
         "a time index's view")


@covers("find_timestamp")
def test_find_timestamp():
    for what, buf in cases():
        rows = compiled_module().walk_batches(buf, min(len(PAD), len(buf)), -1, False)[0]
        stamps = {-1, 0, 2**63 - 1} | {int(r["max_timestamp"]) + d for r in rows
                                       for d in (-1, 0, 1)}
        stamps |= {int(r["base_timestamp"]) + d for r in rows for d in (-600, 0, 300)}
        offsets = {0} | {int(r["base_offset"]) + 1 for r in rows[:3]}
        for start in starts(buf):
            for end in {-1, max(start, len(buf) - 30)}:
                for ts in sorted(stamps):
                    for first in sorted(offsets):
                        same(lambda k: k.find_timestamp(at(buf), start, end, ts, first),
                             f"{what} find_timestamp {start} {end} {ts} {first}")
    same(lambda k: k.find_timestamp(b"abc", 2, 1, 0, 0), "find_timestamp: end before start")


# --- fuzzed inputs ----------------------------------------------------------------------------

@covers("walk_batches", "check_batches", "decode_v2_records", "decode_v2_offsets",
        "decode_legacy_records", "find_timestamp", "next_valid_batch", "batch_records")
@pytest.mark.parametrize("seed", range(6))
def test_fuzz_cases(seed):
    """``test_faults``' mutations of Kafka-written logs (bit flips, truncation, zero runs,
    garbage, huge lengths, inserted bytes) through the walk, decode and search kernels."""
    for i, buf in enumerate(fuzzed(50, seed)):
        rows, _ = decode_all(buf, f"fuzz {seed}/{i}")
        same(lambda k: k.walk_batches(at(buf), len(PAD)), f"fuzz {seed}/{i} walk")
        same(lambda k: k.walk_batches(at(buf), len(PAD), -1, True, True), f"fuzz {seed}/{i}")
        same(lambda k: k.next_valid_batch(at(buf), len(PAD) + 1), f"fuzz {seed}/{i} resync")
        ts = int(rows["max_timestamp"][len(rows) // 2]) if len(rows) else 0
        same(lambda k: k.find_timestamp(at(buf), len(PAD), -1, ts, 0), f"fuzz {seed}/{i} ts")


# --- Kafka 0.7 entries ------------------------------------------------------------------------

def log07_cases():
    """(name, buffer) of Kafka 0.7 entries: magic 0 and 1, wrappers, empty payloads, and every
    way a walk stops (torn length, torn entry, size below the header, unknown magic, bad
    CRC32, zeros)."""
    from kafkalog.log07.format import encode_entry, encode_message_set
    rng = random.Random(31)
    good = b"".join([encode_entry(b"", magic=0), encode_entry(b"m0" * 9, magic=0),
                     encode_entry(b""), encode_entry(rng.randbytes(300)),
                     encode_message_set([b"a", b"bb"], 1)[0],
                     encode_message_set([rng.randbytes(40)] * 3, 2)[0],
                     encode_entry(rng.randbytes(8), codec=3)])
    bad_crc = bytearray(encode_entry(b"payload"))
    bad_crc[-1] ^= 1
    cases = [("empty", b""), ("good", good), ("torn length", good + b"\0\0\0"),
             ("torn entry", good + encode_entry(b"lost")[:-2]),
             ("size below header", good + struct.pack(">ib", 4, 0) + b"\0" * 8),
             ("v1 below header", good + struct.pack(">ib", 5, 1) + b"\0" * 8),
             ("unknown magic", good + struct.pack(">ib", 9, 2) + b"\0" * 9),
             ("bad crc then zeros", good + bytes(bad_crc) + b"\0" * 40),
             ("negative size", good + struct.pack(">i", -7) + b"\0" * 20)]
    for i in range(20):
        damaged = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(len(damaged))] = rng.randrange(256)
        cases.append((f"random damage {i}", bytes(damaged[:rng.randint(0, len(damaged))])))
    return cases


@covers("walk_log07")
def test_walk_log07():
    for what, buf in log07_cases():
        for crc in (True, False):
            for most in (-1, 0, 1, 3):
                same(lambda k: k.walk_log07(at(buf), 0, -1, crc, most), f"{what} {crc} {most}")
        rows = compiled_module().walk_log07(buf, 0, -1, False)[0]
        for start in rows["position"][1:3].tolist():
            same(lambda k: k.walk_log07(at(buf), start, len(buf) - 1), f"{what} from {start}")
        same(lambda k: k.walk_log07(bytearray(buf)), f"{what} of a bytearray")
    same(lambda k: k.walk_log07(b"abc", 4), "start past the end")
    same(lambda k: k.walk_log07(b"abc", -1), "negative start")


def _mapping_scenario(k, path):
    """What the engine does with a ``FileMapping``: map, read, write, flush, close (with and
    without an exported view), map read-only (the compiled one a shared mapping, the twin's a
    copy); the outcomes in order."""
    import os
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * 20)
    fd = os.open(path, os.O_RDWR)
    try:
        m = k.FileMapping(fd, 5000, True)
        ro = k.FileMapping(fd, 300)
    finally:
        os.close(fd)            # the mappings outlive the descriptor
    # (read-only: read before the writes below, which the twin's copy does not see)
    out = [len(m), m[0], m[-1], m[10:20], m[4990:6000], m[::1000], m[30:10], ro[0:12]]
    m[0:4] = b"abcd"
    struct.pack_into(">i", m, 8, -2)
    for bad in (lambda: m.__setitem__(slice(0, 2), b"abc"), lambda: m[5000],
                lambda: ro.__setitem__(slice(0, 1), b"x"), lambda: k.FileMapping(-1, 0)):
        try:
            bad()
        except (IndexError, TypeError, ValueError) as e:
            out.append((type(e).__name__, str(e)))
    with memoryview(m) as view:
        out.append(bytes(view[:12]))
        try:
            m.close()
        except BufferError as e:
            out.append(("BufferError", str(e)))
    m.flush()
    m.close()
    try:
        m[0]
    except ValueError as e:
        out.append(str(e))
    out.append(ro.closed if hasattr(ro, "closed") else None)
    with open(path, "rb") as f:
        out.append(f.read(12))
    return out


@covers("FileMapping")
def test_file_mapping(tmp_path):
    same(lambda k: _mapping_scenario(k, tmp_path / "mapped"), "file mapping")
