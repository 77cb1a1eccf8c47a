"""Shared data for the benchmarks: the Kafka-written large fixtures and seeded generators."""
import os
import random
import struct
import tempfile

from kafkalog import Record, build_batch, _core, _core_py
from kafkalog.producer_state import write_snapshot
from kafkalog.records import open_buffer

HERE = os.path.dirname(os.path.abspath(__file__))
LARGE = os.path.normpath(os.path.join(HERE, "..", "..", "shared", "fixtures",
                                      "kafka-written-large"))
BENCH = os.path.join(LARGE, "bench-0")
FIRST = os.path.join(BENCH, "00000000000000000000")     # the stem of bench-0's first segment
BENCH_LZ4 = os.path.join(LARGE, "bench_lz4-0")
IMPLS = {"cython": _core, "python": _core_py}


def logs(directory):
    return sorted(os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log"))


def buffers(directory, first_only=False):
    paths = logs(directory)
    return [open_buffer(p) for p in (paths[:1] if first_only else paths)]


def random_targets(n, high, seed=1):
    rng = random.Random(seed)
    return [rng.randrange(0, high) for _ in range(n)]


def batch_of(size_bytes, seed=0):
    """One v2 batch of about ``size_bytes`` (1 record when ``size_bytes`` is small)."""
    per_record = 100
    n = max(1, size_bytes // per_record)
    rng = random.Random(seed)
    return build_batch([Record(key=b"k%06d" % i, value=rng.randbytes(per_record - 30),
                               timestamp=1_700_000_000_000 + i) for i in range(n)])


def small_segments(n):
    """A new partition directory of ``n`` small segments (10 records each), cleanly closed."""
    directory = os.path.join(tempfile.mkdtemp(prefix="kafkalog-asv-"), "bench-0")
    write_small_segments(directory, n)
    return directory


def write_small_segments(directory, n):
    """Write ``n`` small segments (10 records each) and a snapshot at the log end offset
    into ``directory``, as a clean close would leave them."""
    os.makedirs(directory, exist_ok=True)
    for i in range(n):
        base = i * 10
        data = build_batch([Record(key=b"k", value=b"v" * 50, timestamp=1000 + base + j)
                            for j in range(10)], base_offset=base)
        stem = os.path.join(directory, f"{base:020d}")
        with open(stem + ".log", "wb") as f:
            f.write(data)
        open(stem + ".index", "wb").close()
        with open(stem + ".timeindex", "wb") as f:
            f.write(struct.pack(">qi", 1009 + base, 9))
    write_snapshot(os.path.join(directory, f"{n * 10:020d}.snapshot"), [])


def linked_log_dirs(prefix, counts):
    """{P: a new log dir of P partitions ``t-0`` ... of topic ``t``} for each P of
    ``counts``: hard links to the files of one partition of one small segment (10 records)."""
    root = tempfile.mkdtemp(prefix=prefix)
    source = os.path.join(root, "source")
    write_small_segments(source, 1)
    dirs = {}
    for count in counts:
        log_dir = dirs[count] = os.path.join(root, f"logs-{count}")
        for i in range(count):
            d = os.path.join(log_dir, f"t-{i}")
            os.makedirs(d)
            for name in os.listdir(source):
                os.link(os.path.join(source, name), os.path.join(d, name))
    return dirs


def log07_entries(n, payload_bytes, seed=0, codec="none", per_wrapper=1):
    """``n`` Kafka 0.7 entries of random payloads (seeded), as 0.7 wrote them: magic 1
    messages, or wrappers of ``per_wrapper`` messages compressed with ``codec``."""
    from kafkalog.log07.format import codec_of, encode_message_set
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        payloads = [rng.randbytes(payload_bytes) for _ in range(per_wrapper)]
        out.append(encode_message_set(payloads, codec_of(codec))[0])
    return b"".join(out)
