"""``recovery_summary`` (recovery's checks and index bytes in one kernel call) in both
implementations, and the producer state a recovery leaves at the log end (no second pass)."""
import os
import random
import struct

import numpy as np
import pytest
from conftest import KERNELS
from test_kernels import both, sample_batches

from kafkalog import Record, build_batch, build_control_batch, loader
from kafkalog.loader import rebuild_producer_state
from kafkalog.log import Log


def expected(kernels, batches, base, interval):
    """The index file bytes as Kafka lays them out, from ``index_entries_for``."""
    offsets, times, max_ts, max_ts_offset, _ = kernels.index_entries_for(batches, interval)
    rows = times.tolist()
    if max_ts >= 0 and (not rows or rows[-1][0] < max_ts):
        rows.append([max_ts, max_ts_offset])      # the entry Kafka appends at close
    return (b"".join(struct.pack(">ii", o - base, p) for o, p in offsets.tolist()),
            b"".join(struct.pack(">qi", t, o - base) for t, o in rows), max_ts, max_ts_offset)


def walked(data):
    return both("walk_batches", data, 0)[0]


@pytest.mark.parametrize("interval", [0, 100, 4096, 1 << 30])
@pytest.mark.parametrize("seed", [1, 2])
def test_index_bytes_match_kafka_layout(interval, seed):
    base = 1000
    data = b"".join(build_batch([Record(value=b"x" * random.Random(seed + i).randint(0, 400),
                                        timestamp=ts)], base_offset=base + 3 * i)
                    for i, ts in enumerate(random.Random(seed).sample(range(1, 10**6), 40)))
    batches = walked(data)
    out = both("recovery_summary", batches, base, interval)
    bad, valid, offset_index, time_index, max_ts, max_off, last_entry, producers, epoch = out
    assert bad == -1 and valid == len(data) and producers == 0 and epoch == -1
    for kernels in KERNELS.values():
        assert (offset_index, time_index, max_ts, max_off) == expected(kernels, batches, base,
                                                                       interval)
    positions = [p for _, p in struct.iter_unpack(">ii", offset_index)]
    assert last_entry == (positions[-1] if positions else 0)


def test_boundaries():
    empty = np.zeros(0, walked(build_batch([Record(value=b"v")])).dtype)
    assert both("recovery_summary", empty, 0, 4096) == (-1, 0, b"", b"", -1, -1, 0, 0, -1)
    # a batch without timestamps (-1) has no time index entry at all
    one = walked(build_batch([Record(value=b"v", timestamp=-1)], base_offset=7))
    _, valid, offset_index, time_index, max_ts, _, _, _, _ = both("recovery_summary", one, 7, 0)
    assert (offset_index, time_index, max_ts) == (b"", b"", -1)
    assert valid == int(one["size"][0])
    # offsets below the base, or more than 2**31 - 1 above it: the first such row
    data = b"".join(build_batch([Record(value=b"v", timestamp=1)], base_offset=o)
                    for o in (10, 11, 2**31 + 20))
    batches = walked(data)
    assert both("recovery_summary", batches, 11, 0)[0] == 0
    assert both("recovery_summary", batches, 10, 0)[0] == 2
    assert both("recovery_summary", batches, 21, 0)[0] == 0
    assert both("recovery_summary", batches[:2], 10, 0)[0] == -1


def test_producers_and_leader_epochs_counted():
    data = b"".join([
        build_batch([Record(value=b"a", timestamp=5)], base_offset=0, partition_leader_epoch=3),
        build_batch([Record(value=b"b", timestamp=6)], base_offset=1, producer_id=42,
                    producer_epoch=0, base_sequence=0, transactional=True,
                    partition_leader_epoch=7),
        build_control_batch("abort", producer_id=42, producer_epoch=0, base_offset=2,
                            timestamp=7, partition_leader_epoch=5),
        build_batch([Record(value=b"c", timestamp=8)], base_offset=3, magic=1),
    ])
    out = both("recovery_summary", walked(data), 0, 0)
    assert out[7] == 2 and out[8] == 7


@pytest.mark.parametrize("seed", range(4))
def test_random_inputs_agree(seed):
    rng = random.Random(seed)
    data = b"".join(sample_batches(rng.randint(1, 30), seed=seed))
    batches = walked(data)
    base = int(batches["base_offset"][0])
    both("recovery_summary", batches, base, rng.choice([0, 64, 1000, 4096]))


def txn_log(path, n_segments):
    """A log whose producers span segments: an ongoing transaction, an aborted one, and an
    idempotent producer; closed without a snapshot at its end (as after a crash)."""
    log = Log.open(path, {"segment.bytes": 300})
    for i in range(n_segments):
        log.append(build_batch([Record(value=b"x" * 60)], producer_id=1, producer_epoch=0,
                               base_sequence=i))
        log.append(build_batch([Record(value=b"t%d" % i)], producer_id=2, producer_epoch=0,
                               base_sequence=i, transactional=True))
        if i == n_segments // 2:
            log.append(build_control_batch("abort", producer_id=2, producer_epoch=0,
                                           timestamp=1))
    log.append(build_batch([Record(value=b"open")], producer_id=3, producer_epoch=1,
                           base_sequence=0, transactional=True))
    log.close()
    for name in os.listdir(path):
        if name.endswith(".snapshot"):
            os.remove(os.path.join(path, name))


def test_recovery_leaves_the_state_at_the_log_end(tmp_path, monkeypatch):
    path = str(tmp_path / "t-0")
    txn_log(path, 12)

    def second_pass(*args, **kwargs):
        raise AssertionError("the producer state was rebuilt after recovery")
    with monkeypatch.context() as m:
        m.setattr(loader, "rebuild_producer_state", second_pass)
        log = Log.open(path, clean_shutdown=False, recovery_point=0)
    try:
        assert len(log.segments) > 3
        recovered = log._producer_state
        rebuilt = rebuild_producer_state(path, log.segments, log.log_end_offset)
        assert recovered.producers == rebuilt.producers
        assert recovered.ongoing == rebuilt.ongoing
        assert set(recovered.ongoing) == {2, 3}
    finally:
        log.close()
