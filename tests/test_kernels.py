"""Every kernel against its pure-Python twin, on boundary tables and random inputs, with the
input embedded at a non-zero offset so that position arithmetic is exercised."""
import random
import struct

import numpy as np
import pytest

from kafkalog import build_batch, Record
from kafkalog._layout import (
    BATCH_DTYPE, OFFSET_KEY, OFFSET_VALUE, TIME_KEY, TIME_VALUE, WALK_CORRUPT, WALK_END,
    WALK_INVALID, WALK_PARTIAL,
)
from kafkalog.errors import CorruptRecordError

from conftest import FIXTURES, KERNELS

PAD = b"\xAB" * 37   # a prefix so that batch positions do not start at 0


def both(name, *args, **kwargs):
    """Run a kernel in every implementation; assert they agree; return the result."""
    results = {impl: getattr(mod, name)(*args, **kwargs) for impl, mod in KERNELS.items()}
    first = next(iter(results.values()))
    for impl, res in results.items():
        assert_same(first, res, f"{name}: {impl} differs")
    return first


def assert_same(a, b, msg):
    if isinstance(a, tuple):
        assert len(a) == len(b), msg
        for x, y in zip(a, b):
            assert_same(x, y, msg)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape, msg
        assert (a == b).all(), msg
    else:
        assert a == b, msg


def errors_of(name, *args):
    """The CorruptRecordError each implementation raises; asserts they agree on the position."""
    found = {}
    for impl, mod in KERNELS.items():
        with pytest.raises(CorruptRecordError) as e:
            getattr(mod, name)(*args)
        found[impl] = e.value
    positions = {e.position for e in found.values()}
    assert len(positions) == 1, found
    return next(iter(found.values()))


def sample_batches(n=5, seed=1, compression="none"):
    rng = random.Random(seed)
    out = []
    offset = 0
    for _ in range(n):
        records = [Record(key=rng.choice([None, b"", rng.randbytes(rng.randint(1, 20))]),
                          value=rng.choice([None, b"", rng.randbytes(rng.randint(1, 300))]),
                          timestamp=1_700_000_000_000 + rng.randint(-1000, 1000),
                          headers=[("h\u00e9", rng.choice([None, b"x" * rng.randint(0, 5)]))]
                          * rng.randint(0, 3))
                   for _ in range(rng.randint(1, 12))]
        out.append(build_batch(records, base_offset=offset, compression=compression))
        offset += len(records)
    return out


def test_struct_layouts_match_numpy():
    from kafkalog._layout import RECORD_DTYPE, HEADER_DTYPE, LOG07_ENTRY_DTYPE
    sizes = {"batch": BATCH_DTYPE.itemsize, "record": RECORD_DTYPE.itemsize,
             "header": HEADER_DTYPE.itemsize, "log07": LOG07_ENTRY_DTYPE.itemsize}
    assert sizes == {"batch": 80, "record": 64, "header": 24, "log07": 32}
    if "compiled" in KERNELS:
        assert KERNELS["compiled"].STRUCT_SIZES == sizes


# ---------------------------------------------------------------------------------------------
# Walk

@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_walk_fixture_logs_agree(name):
    for log in sorted((FIXTURES / name).glob("*.log")):
        data = PAD + log.read_bytes()
        batches, status, stop, _ = both("walk_batches", data, len(PAD))
        assert status in (WALK_END, WALK_PARTIAL)
        assert (batches["position"] >= len(PAD)).all()


def test_walk_boundaries(kernels):
    batches = sample_batches()
    data = PAD + b"".join(batches)
    end = len(data)
    # empty buffer and empty range
    assert kernels.walk_batches(b"")[1:] == (WALK_END, 0, None)
    res = both("walk_batches", data, end)
    assert len(res[0]) == 0 and res[1] == WALK_END
    # whole buffer
    res = both("walk_batches", data, len(PAD))
    assert len(res[0]) == len(batches) and res[1] == WALK_END and res[2] == end
    assert (res[0]["crc_valid"] == 1).all()
    # torn last batch: a partial tail
    res = both("walk_batches", data[:-5], len(PAD))
    assert len(res[0]) == len(batches) - 1 and res[1] == WALK_PARTIAL
    assert res[2] == end - len(batches[-1])
    # fewer than 17 bytes left
    res = both("walk_batches", data + b"\0" * 10, len(PAD))
    assert res[1] == WALK_PARTIAL and res[2] == end
    # max_batches
    res = both("walk_batches", data, len(PAD), -1, True, False, 2)
    assert len(res[0]) == 2
    # without CRC validation
    res = both("walk_batches", data, len(PAD), -1, False)
    assert (res[0]["crc_valid"] == -1).all()


def test_walk_bad_crc(kernels):
    batches = sample_batches()
    data = bytearray(PAD + b"".join(batches))
    second = len(PAD) + len(batches[0])
    data[second + 70] ^= 0xFF
    data = bytes(data)
    res = both("walk_batches", data, len(PAD))
    assert res[1] == WALK_END and list(res[0]["crc_valid"]) == [1, 0] + [1] * (len(batches) - 2)
    res = both("walk_batches", data, len(PAD), -1, True, True)
    assert res[1] == WALK_INVALID and res[2] == second and len(res[0]) == 1
    # the leader epoch is outside the CRC on purpose
    data = bytearray(PAD + b"".join(batches))
    data[second + 12:second + 16] = struct.pack(">i", 77)
    res = both("walk_batches", bytes(data), len(PAD))
    assert (res[0]["crc_valid"] == 1).all() and res[0]["partition_leader_epoch"][1] == 77


@pytest.mark.parametrize("size,magic", [(13, 2), (-1, 2), (-2**31, 2), (30, 2), (48, 2),
                                        (20, 1), (13, 0), (200, 3), (200, -1)])
def test_walk_structural_corruption(size, magic):
    good = sample_batches(2)
    bad = bytearray(good[0])
    struct.pack_into(">ib", bad, 8, size, 0)
    bad[16] = magic & 0xFF
    data = PAD + good[1] + bytes(bad) + b"\0" * 300
    res = both("walk_batches", data, len(PAD))
    assert res[1] == WALK_CORRUPT and res[2] == len(PAD) + len(good[1])
    assert len(res[0]) == 1 and res[3]


def test_walk_huge_length_is_a_partial_tail():
    good = sample_batches(1)[0]
    bad = bytearray(good)
    struct.pack_into(">i", bad, 8, 2**31 - 1)
    res = both("walk_batches", PAD + bytes(bad), len(PAD))
    assert res[1] == WALK_PARTIAL and len(res[0]) == 0


def test_walk_random_bytes_agree():
    rng = random.Random(7)
    good = b"".join(sample_batches(6, seed=3))
    for _ in range(300):
        data = bytearray(PAD + good)
        for _ in range(rng.randint(1, 6)):
            data[rng.randrange(len(PAD), len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            del data[rng.randrange(len(PAD), len(data)):]
        both("walk_batches", bytes(data), len(PAD))


def test_walk_legacy_entries():
    from kafkalog.builder import build_batch as bb
    data = PAD + bb([Record(key=b"k", value=b"v", timestamp=5)] * 3, magic=1) + \
        bb([Record(value=b"x")] * 2, magic=0, base_offset=3)
    res = both("walk_batches", data, len(PAD))
    b = res[0]
    assert list(b["magic"]) == [1, 1, 1, 0, 0] and list(b["base_offset"]) == [0, 1, 2, 3, 4]
    assert list(b["max_timestamp"]) == [5, 5, 5, -1, -1] and (b["crc_valid"] == 1).all()
    recs = both("decode_legacy_records", data, b)
    assert list(recs["key_len"]) == [1, 1, 1, -1, -1] and list(recs["value_len"]) == [1] * 5
    assert data[recs["value_pos"][0]:recs["value_pos"][0] + 1] == b"v"


# ---------------------------------------------------------------------------------------------
# Record decode

def regions(data, batches):
    b = both("walk_batches", data, len(PAD))[0]
    starts = b["position"] + 61
    ends = b["position"] + b["size"].astype(np.int64)
    return (starts, ends, b["base_offset"].copy(), b["base_timestamp"].copy(),
            b["record_count"].astype(np.int64))


@pytest.mark.parametrize("seed", range(8))
def test_decode_random_batches_agree(seed):
    batches = sample_batches(6, seed=seed)
    data = PAD + b"".join(batches)
    args = regions(data, batches)
    records, headers = both("decode_v2_records", data, *args)
    assert len(records) == int(args[4].sum()) > 0
    assert records["offset"][0] == 0 and (np.diff(records["offset"]) == 1).all()
    assert (records["header_start"][records["header_count"] > 0] < len(headers)).all()


def test_decode_empty_regions_and_zero_record_batch():
    data = PAD + build_batch([], base_offset=5)
    r = regions(data, None)
    records, headers = both("decode_v2_records", data, *r)
    assert len(records) == 0 and len(headers) == 0
    empty = np.empty(0, np.int64)
    records, headers = both("decode_v2_records", b"", empty, empty, empty, empty, empty)
    assert len(records) == 0


def _one_record_region(body):
    """A region holding one hand-made record: varint length + body."""
    from kafkalog._common_py import zigzag_varint as _varint
    rec = _varint(len(body)) + body
    data = PAD + rec
    arr = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
    return data, (arr(len(PAD)), arr(len(data)), arr(100), arr(1000), arr(1))


def test_decode_hand_made_record_fields():
    from kafkalog._common_py import zigzag_varint as _varint
    body = (b"\x00" + _varint(-7) + _varint(3) + _varint(2) + b"ab" + _varint(-1) + _varint(1)
            + _varint(1) + b"h" + _varint(-1))
    data, args = _one_record_region(body)
    records, headers = both("decode_v2_records", data, *args)
    r = records[0]
    assert (r["offset"], r["timestamp"], r["key_len"], r["value_len"], r["header_count"]) == \
        (103, 993, 2, -1, 1)
    assert data[r["key_pos"]:r["key_pos"] + 2] == b"ab"
    assert headers[0]["key_len"] == 1 and headers[0]["value_len"] == -1


@pytest.mark.parametrize("body", [
    b"\x00" + b"\xff" * 12,                                   # varint never ends
    b"\x00\x00\x00\x7f" + b"\x00" * 5,                        # key length 63 > record
    b"\x00\x00\x00\x00\x00\x01",                              # header count -1
    b"\x00\x00\x00\x00\x00\x02\x01\x00",                      # header key size -1
    b"\x00\x00\x00\x00\x00\x00\x00",                          # one byte too many in the record
    b"\x00\x00\x00\x02ab\x00",                                # record ends before header count
], ids=["endless-varint", "key-past-end", "negative-headers", "negative-header-key",
        "size-mismatch", "truncated"])
def test_decode_corrupt_records(body):
    data, args = _one_record_region(body)
    err = errors_of("decode_v2_records", data, *args)
    assert err.position == len(PAD)


def test_decode_bad_counts():
    data = PAD + build_batch([Record(value=b"v")] * 3)
    starts, ends, bo, bt, counts = regions(data, None)
    for bad in ([2], [4], [-1], [2**31]):
        errors_of("decode_v2_records", data, starts, ends, bo, bt, np.array(bad, np.int64))


def test_decode_outer_varint_endless():
    data = PAD + b"\xff" * 20
    arr = lambda v: np.array([v], dtype=np.int64)  # noqa: E731
    err = errors_of("decode_v2_records", data, arr(len(PAD)), arr(len(data)), arr(0), arr(0),
                    arr(1))
    assert err.position == len(PAD)


# ---------------------------------------------------------------------------------------------
# Index kernels

def offset_index_bytes(entries):
    return b"".join(struct.pack(">ii", o, p) for o, p in entries)


def time_index_bytes(entries):
    return b"".join(struct.pack(">qi", t, o) for t, o in entries)


def brute_lower(values, target):
    found = [i for i, v in enumerate(values) if v <= target]
    return found[-1] if found else -1


def brute_upper(values, target):
    found = [i for i, v in enumerate(values) if v >= target]
    return found[0] if found else -1


@pytest.mark.parametrize("n", [0, 1, 2, 3, 1023, 1024, 1025, 1026, 3000])
def test_offset_index_search_matches_brute_force(n):
    rng = random.Random(n)
    offsets = sorted(rng.sample(range(1, 10 * n + 10), n))
    positions = sorted(rng.sample(range(1, 100 * n + 10), n))
    buf = offset_index_bytes(zip(offsets, positions))
    targets = [0, -5, 10**12] + [rng.randint(0, 10 * n + 12) for _ in range(200)] + offsets[:5] \
        + offsets[-5:]
    for t in targets:
        assert both("index_search", buf, n, OFFSET_KEY, t) == brute_lower(offsets, t)
        slot = brute_lower(offsets, t)
        assert both("index_lookup", buf, n, OFFSET_KEY, t) == \
            ((slot, offsets[slot], positions[slot]) if slot >= 0 else (-1, 0, 0))
        assert both("index_search", buf, n, OFFSET_VALUE, t * 10, True) == \
            brute_upper(positions, t * 10)
    arr = np.array(targets, dtype=np.int64)
    many = both("index_search_many", buf, n, OFFSET_KEY, arr)
    assert list(many) == [brute_lower(offsets, t) for t in targets]


@pytest.mark.parametrize("shape", ["squares", "clusters", "one jump"])
def test_index_search_where_keys_do_not_grow_linearly(shape):
    # The search narrows its range around an interpolated slot; keys far from a line must
    # still find the same slot (the window misses and the full range is searched).
    rng = random.Random(shape)
    n = 3000
    if shape == "squares":
        offsets = [i * i + 1 for i in range(n)]
    elif shape == "clusters":
        offsets = sorted(rng.sample(range(1, 5000), n // 2)
                         + rng.sample(range(10**8, 10**8 + 5000), n // 2))
    else:
        offsets = list(range(1, n)) + [2**31 - 1]
    positions = list(range(0, 8 * n, 8))
    buf = offset_index_bytes(zip(offsets, positions))
    targets = [rng.randint(0, offsets[-1] + 5) for _ in range(300)] + offsets[::97] \
        + [o + 1 for o in offsets[::89]] + [o - 1 for o in offsets[::83]]
    for t in targets:
        assert both("index_search", buf, n, OFFSET_KEY, t) == brute_lower(offsets, t)
        assert both("index_search", buf, n, OFFSET_KEY, t, True) == brute_upper(offsets, t)


@pytest.mark.parametrize("n", [0, 1, 681, 682, 683, 684, 2000])
def test_time_index_search_matches_brute_force(n):
    rng = random.Random(n)
    timestamps = sorted(rng.sample(range(1, 10 * n + 10), n))
    offsets = sorted(rng.sample(range(0, 10 * n + 10), n))
    buf = PAD[:0] + time_index_bytes(zip(timestamps, offsets))
    for t in [-1, 0, 10**15] + [rng.randint(0, 10 * n + 12) for _ in range(200)]:
        assert both("index_search", buf, n, TIME_KEY, t) == brute_lower(timestamps, t)
        assert both("index_search", buf, n, TIME_VALUE, t) == brute_lower(offsets, t)
        slot = brute_lower(timestamps, t)
        assert both("index_lookup", buf, n, TIME_KEY, t) == \
            ((slot, timestamps[slot], offsets[slot]) if slot >= 0 else (-1, 0, 0))


def test_index_entries_and_valid_entries():
    entries = [(5, 100), (9, 4200), (12, 9000)]
    buf = offset_index_bytes(entries) + b"\0" * 8 * 100 + b"\0\0\0"
    keys, values = both("index_entries", buf, 3, OFFSET_KEY)
    assert list(keys) == [5, 9, 12] and list(values) == [100, 4200, 9000]
    assert both("index_valid_entries", buf, 8) == 3
    assert both("index_valid_entries", b"", 8) == 0
    assert both("index_valid_entries", b"\0" * 24, 12) == 0
    tbuf = time_index_bytes([(7, 1), (9, 0)]) + b"\0" * 12 * 5
    assert both("index_valid_entries", tbuf, 12) == 2
    ts, offs = both("index_entries", tbuf, 2, TIME_KEY)
    assert list(ts) == [7, 9] and list(offs) == [1, 0]
    # an entry that is zero only in its first bytes still counts
    assert both("index_valid_entries", b"\0" * 15 + b"\1" + b"\0" * 8, 8) == 2


def test_index_arguments_checked(kernels):
    with pytest.raises(ValueError):
        kernels.index_search(b"\0" * 8, 2, OFFSET_KEY, 0)
    with pytest.raises(ValueError):
        kernels.index_search(b"\0" * 8, 1, 9, 0)
    with pytest.raises(ValueError):
        kernels.index_valid_entries(b"", 0)
    with pytest.raises(ValueError):
        kernels.index_lookup(b"\0" * 8, 2, OFFSET_KEY, 0)
    with pytest.raises(ValueError):
        kernels.index_lookup(b"\0" * 8, 1, -1, 0)


# ---------------------------------------------------------------------------------------------
# Segment scans and append preparation

def test_find_batch_agrees():
    batches = sample_batches(8, seed=11)
    data = PAD + b"".join(batches)
    walked = both("walk_batches", data, len(PAD))[0]
    for target in range(-1, int(walked["last_offset"][-1]) + 3):
        pos, size = both("find_batch", data, len(PAD), len(data), target)
        later = walked[walked["last_offset"] >= target]
        if len(later):
            assert (pos, size) == (int(later["position"][0]), int(later["size"][0]))
        else:
            assert (pos, size) == (-1, 0)
    assert both("find_batch", data[:-3], len(PAD), -1, 10 ** 9) == (-1, 0)


@pytest.mark.parametrize("interval", [0, 100, 4096])
def test_index_entries_for_agrees(interval):
    data = PAD + b"".join(sample_batches(30, seed=interval))
    walked = both("walk_batches", data, len(PAD))[0]
    offsets, times, max_ts, max_off, since_last = both("index_entries_for", walked, interval, 0)
    assert max_ts == int(walked["max_timestamp"].max())
    assert 0 <= since_last <= int(walked["size"].sum())
    if interval == 0:
        assert len(offsets) == len(walked) - 1
    assert len(times) < 2 or (np.diff(times[:, 0]) > 0).all()


def _prepare(impl, data, *args):
    buf = bytearray(data)
    return KERNELS[impl].prepare_append(buf, *args), bytes(buf)


@pytest.mark.parametrize("assign,lat", [(-1, -1), (1000, -1), (0, 1_800_000_000_000)])
def test_prepare_append_agrees(assign, lat):
    data = b"".join(sample_batches(6, seed=4)) + build_batch([Record(value=b"z")] * 3,
                                                             base_offset=500,
                                                             compression="gzip",
                                                             producer_id=9)
    results = {impl: _prepare(impl, data, assign, 10 ** 6, lat) for impl in KERNELS}
    first = next(iter(results.values()))
    assert all(r == first for r in results.values())
    (n, first_offset, last, max_ts, off_max, count, flags, epoch), out = first
    assert n == 7 and flags == 3
    assert epoch == int(both("walk_batches", out, 0)[0]["partition_leader_epoch"].max())
    walked = both("walk_batches", out, 0)[0]
    assert (walked["crc_valid"] == 1).all()
    if assign >= 0:
        assert first_offset == assign and last == assign + count - 1
        assert (walked["base_offset"][1:] == walked["last_offset"][:-1] + 1).all()
    if lat >= 0:
        assert max_ts == lat and (walked["max_timestamp"] == lat).all()
        assert (walked["attributes"] & 0x08).all()


@pytest.mark.parametrize("damage", ["crc", "partial", "magic", "small", "records", "order",
                                    "large", "empty"])
def test_prepare_append_rejects(damage):
    from kafkalog.errors import KafkaLogError
    batches = sample_batches(3, seed=2)
    data = bytearray(b"".join(batches))
    limit = 10 ** 6
    second = len(batches[0])
    if damage == "crc":
        data[second + 80] ^= 1
    elif damage == "partial":
        data = data[:-2]
    elif damage == "magic":
        data = bytearray(build_batch([Record(value=b"v")], magic=1))
    elif damage == "small":
        struct.pack_into(">i", data, second + 8, 30)
    elif damage == "records":
        bad = bytearray(batches[1])
        struct.pack_into(">i", bad, 57, 99)            # more records than the batch holds
        from crc32c import crc32c
        struct.pack_into(">I", bad, 17, crc32c(bytes(bad[21:])))
        data = bytearray(batches[0]) + bad
    elif damage == "order":
        data = bytearray(batches[1] + batches[0])
    elif damage == "large":
        limit = 100
    elif damage == "empty":
        data = bytearray()
    positions = set()
    for impl in KERNELS:
        with pytest.raises(KafkaLogError) as e:
            KERNELS[impl].prepare_append(bytearray(data), -1, limit, -1)
        positions.add((type(e.value), getattr(e.value, "position", None)))
    assert len(positions) == 1, positions


def test_both_kernel_modules_define_every_kernel():
    from kafkalog._kernels import KERNEL_NAMES
    for module in KERNELS.values():
        for name in KERNEL_NAMES:
            assert callable(getattr(module, name)), name


@pytest.mark.parametrize("n", [0, 1, 5, 1025, 3000])
def test_index_view_and_lookup_many_agree(n):
    import collections
    pair = collections.namedtuple("pair", "a b")
    rng = random.Random(n)
    offsets = sorted(rng.sample(range(1, 10 * n + 10), n))
    positions = sorted(rng.sample(range(1, 100 * n + 10), n))
    base = 1000
    buf = offset_index_bytes(zip(offsets, positions))
    targets = [base - 5, base, base + 10 * n + 20] + [base + rng.randint(0, 10 * n + 12)
                                                      for _ in range(300)]
    want = []
    for t in targets:
        slot = brute_lower(offsets, t - base)
        want.append((base + offsets[slot], positions[slot]) if slot >= 0 else (base, 0))
    for impl, module in KERNELS.items():
        view = module.IndexView(buf, n, base, OFFSET_KEY, pair)
        got = [view.lookup(t) for t in targets]
        assert got == want and all(type(g) is pair for g in got), impl
        view.release()
        with pytest.raises(ValueError):
            view.lookup(base)
    a, b = both("index_lookup_many", buf, n, OFFSET_KEY, base, np.array(targets, np.int64))
    assert list(zip(a.tolist(), b.tolist())) == want
    timestamps = sorted(rng.sample(range(1, 10 * n + 10), n))
    tbuf = time_index_bytes(zip(timestamps, offsets))
    twant = []
    for t in targets:
        slot = brute_lower(timestamps, t)
        twant.append((timestamps[slot], base + offsets[slot]) if slot >= 0 else (-1, base))
    for impl, module in KERNELS.items():
        view = module.IndexView(tbuf, n, base, TIME_KEY, pair)
        assert [view.lookup(t) for t in targets] == twant, impl
    a, b = both("index_lookup_many", tbuf, n, TIME_KEY, base, np.array(targets, np.int64))
    assert list(zip(a.tolist(), b.tolist())) == twant


def test_span_bytes_agree():
    data = PAD + b"abcdefghij"
    positions = np.array([len(PAD), len(PAD) + 3, len(PAD) + 9, 0], np.int64)
    lengths = np.array([2, -1, 1, 0], np.int32)
    assert both("span_bytes", data, positions, lengths) == [b"ab", None, b"j", b""]
    for impl, module in KERNELS.items():
        with pytest.raises(ValueError):
            module.span_bytes(data, np.array([len(data)], np.int64), np.array([1], np.int32))
