"""The compaction kernels (``_compact.pxi``) against their twins and against the slow path they
replace: the key hash (MurmurHash3 x64 128, published vectors), the offset map (latest offset
per key, a full map stops where a new key does not fit), and ``compact_batches``, whose rebuilt
batches must equal what ``build_batch`` writes from the kept records."""
import random
import struct

import numpy as np
import pytest

from kafkalog import Record, build_batch
from kafkalog._kernels import walk_batches
from kafkalog.records import decode_batches

from conftest import KERNELS

COPY, DROP, REBUILD = 0, 1, 2


@pytest.mark.parametrize("key,hexdigest", [
    (b"", "00000000000000000000000000000000"),
    (b"hello", "cbd8a7b341bd9b025b1e906a48ae1d19"),
    (b"The quick brown fox jumps over the lazy dog", "e34bbc7bbc071b6c7a433ca9c49a9347"),
])
def test_key_hash_is_murmur3_x64_128(key, hexdigest):
    for module in KERNELS.values():
        h1, h2 = module.key_hash(key)
        assert f"{h1:016x}{h2:016x}" == hexdigest


def test_key_hash_twins_agree_on_every_tail_length():
    rng = random.Random(3)
    for n in list(range(48)) + [255, 4096]:
        key = bytes(rng.randrange(256) for _ in range(n))
        assert len({m.key_hash(key) for m in KERNELS.values()}) == 1, n


def _table(n_records, keys, seed):
    rng = random.Random(seed)
    data = b"".join(build_batch([Record(key=None if rng.random() < 0.05 else
                                        b"k%d" % rng.randrange(keys),
                                        value=b"v", timestamp=1000 + i)
                                 for i in range(j, min(n_records, j + 50))], base_offset=j)
                    for j in range(0, n_records, 50))
    batches = walk_batches(data)[0]
    return decode_batches(data, batches)


@pytest.mark.parametrize("impl", list(KERNELS))
def test_the_offset_map_holds_each_keys_latest_offset(impl):
    module = KERNELS[impl]
    table = _table(2000, 300, 1)
    recs = table.records
    use = (np.arange(len(recs)) % 7 != 0).astype(np.uint8)
    slots = np.zeros((1024, 3), dtype=np.uint64)
    count, stop = module.offset_map_put(slots, 0, 900, table.data, recs, use)
    want = {}
    for i, k in enumerate(table.keys()):
        if use[i] and k is not None:
            want[k] = max(want.get(k, -1), int(recs["offset"][i]))
    assert stop == len(recs) and count == len(want)
    got = module.offset_map_get(slots, table.data, recs)
    assert got.tolist() == [want.get(k, -1) if k is not None else -1 for k in table.keys()]


@pytest.mark.parametrize("impl", list(KERNELS))
def test_a_full_offset_map_stops_at_the_first_key_that_does_not_fit(impl):
    module = KERNELS[impl]
    table = _table(1000, 10_000, 2)
    recs = table.records
    use = np.ones(len(recs), dtype=np.uint8)
    slots = np.zeros((256, 3), dtype=np.uint64)
    count, stop = module.offset_map_put(slots, 0, 100, table.data, recs, use)
    assert count == 100 and stop < len(recs)
    keys = table.keys()
    distinct_before = {k for k in keys[:stop] if k is not None}
    assert len(distinct_before) == 100 and keys[stop] not in distinct_before


def _batches(seed, n=30):
    """Uncompressed v2 batches with varied timestamps, headers, null keys and values."""
    rng = random.Random(seed)
    out, offset = [], 0
    for _ in range(n):
        count = rng.randint(0, 6)
        base_ts = rng.choice([1_700_000_000_000, -1, 5])
        recs = [Record(key=None if rng.random() < 0.2 else b"key-%d" % rng.randrange(9),
                       value=None if rng.random() < 0.2 else bytes(rng.randrange(256)
                                                                   for _ in range(rng.randrange(40))),
                       timestamp=base_ts + rng.randint(-5000, 500_000),
                       headers=(("h", b"x"),) if rng.random() < 0.3 else (),
                       offset=offset + 2 * i)
                for i in range(count)]
        out.append(build_batch(recs, base_offset=offset, producer_id=rng.choice([-1, 7]),
                               producer_epoch=0, base_sequence=rng.choice([-1, 3]),
                               last_offset=offset + 2 * max(count, 1),
                               partition_leader_epoch=4))
        offset += 2 * max(count, 1) + 1
    return b"\0" * 5 + b"".join(out)


def _slow(buf, batches, table, keep, action, horizon):
    """What the cleaner wrote before the kernel: build_batch from the kept records."""
    out, lo = [], 0
    for b, row in enumerate(batches):
        count = int(row["record_count"])
        if action[b] == COPY:
            p = int(row["position"])
            out.append(bytes(buf[p:p + int(row["size"])]))
        elif action[b] == REBUILD:
            recs = [Record(key=table.key(i), value=table.value(i),
                           timestamp=int(table.records[i]["timestamp"]),
                           headers=table.headers_of(i), offset=int(table.records[i]["offset"]))
                    for i in range(lo, lo + count) if keep[i]]
            out.append(build_batch(
                recs, base_offset=int(row["base_offset"]), last_offset=int(row["last_offset"]),
                producer_id=int(row["producer_id"]), producer_epoch=int(row["producer_epoch"]),
                base_sequence=int(row["base_sequence"]),
                max_timestamp=int(row["max_timestamp"]),
                partition_leader_epoch=int(row["partition_leader_epoch"]),
                delete_horizon_ms=None if horizon[b] < 0 else int(horizon[b])))
        lo += count
    return b"".join(out)


@pytest.mark.parametrize("seed", range(12))
def test_compact_batches_writes_what_build_batch_writes(seed):
    buf = memoryview(_batches(seed))
    batches = walk_batches(buf, 5)[0]
    table = decode_batches(buf, batches)
    rng = np.random.default_rng(seed)
    keep = (rng.random(len(table.records)) < 0.6).astype(np.uint8)
    action = rng.choice([COPY, DROP, REBUILD, REBUILD], size=len(batches)).astype(np.int8)
    horizon = np.where(rng.random(len(batches)) < 0.3, 1_800_000_000_000, -1).astype(np.int64)
    want = _slow(buf, batches, table, keep, action, horizon)
    for module in KERNELS.values():
        got = module.compact_batches(buf, batches, keep, action, horizon)
        assert got == want
    # and what comes out reads back: offsets and records of the kept ones
    out = walk_batches(want)[0]
    assert len(out) == int((action != DROP).sum())
    assert (out["crc_valid"] == 1).all()


def test_compact_batches_refuses_compressed_batches():
    buf = build_batch([Record(key=b"k", value=b"v", timestamp=1)], compression="gzip")
    batches = walk_batches(buf)[0]
    for module in KERNELS.values():
        with pytest.raises(ValueError, match="uncompressed v2"):
            module.compact_batches(buf, batches, np.ones(1, np.uint8), np.zeros(1, np.int8),
                                   np.full(1, -1, np.int64))


def test_the_entry_is_24_bytes():
    for module in KERNELS.values():
        assert module.OFFSET_MAP_ENTRY_BYTES == 24
    assert struct.calcsize("QQQ") == 24
