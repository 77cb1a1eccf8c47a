"""Segment recovery, Log.open (clean and unclean), Log.append and append_batches, the read
paths users call (Log.read, Log.offset_for_timestamp, Log.records) and the kernels under them
(segment_read, find_timestamp), and retention."""
import glob
import os
import random
import shutil
import tempfile

from kafkalog import OffsetIndex, Record, TimeIndex, build_batch
from kafkalog._layout import OFFSET_KEY
from kafkalog.config import LogConfig
from kafkalog.index import OffsetPosition
from kafkalog.log import Log
from kafkalog.records import open_buffer
from kafkalog import segment

from .common import BENCH, FIRST, IMPLS, batch_of, buffers, random_targets, small_segments


class RecoverScan:
    """The recovery scan (walk + CRC + index entries) in either kernel implementation, and
    ``recovery_summary`` alone (the checks and index bytes recovery takes from the walked
    batches of the first segment, one call)."""
    params = ["cython", "python"]
    param_names = ["impl"]

    def setup(self, impl):
        self.kernels = IMPLS[impl]
        self.buf = buffers(BENCH, first_only=True)[0]
        self.batches = self.kernels.walk_batches(self.buf)[0]

    def time_recovery_scan(self, impl):
        batches = self.kernels.walk_batches(self.buf, validate_crc=True, stop_on_invalid=True)[0]
        self.kernels.index_entries_for(batches, 4096)

    def time_recovery_summary(self, impl):
        self.kernels.recovery_summary(self.batches, 0, 4096)


class SegmentRecover:
    def setup(self):
        self.dir = tempfile.mkdtemp(prefix="kafkalog-asv-")
        for p in glob.glob(FIRST + ".*"):
            shutil.copy(p, self.dir)
            os.chmod(os.path.join(self.dir, os.path.basename(p)), 0o644)
        self.segment = segment.LogSegment(self.dir, 0, LogConfig())

    def teardown(self):
        self.segment.close()
        shutil.rmtree(self.dir)

    def time_recover_first_segment(self):
        self.segment.recover()

    def peakmem_recover_first_segment(self):
        self.segment.recover()


class OpenLog:
    params = [1000, 10000]
    param_names = ["segments"]
    timeout = 300

    def setup_cache(self):
        return {n: small_segments(n) for n in self.params}

    def time_open_after_clean_shutdown(self, dirs, n):
        Log.open(dirs[n], clean_shutdown=True).close()


class OpenLogUnclean:
    """Every segment recovered (one pass: issue #16 asks for it within 3x the clean load's
    cost per segment; compare with OpenLog), and the descriptors it leaves open."""
    params = [100, 1000, 10000]
    param_names = ["segments"]
    timeout = 600

    def setup_cache(self):
        return {n: small_segments(n) for n in self.params}

    def time_open_after_unclean_shutdown(self, dirs, n):
        Log.open(dirs[n], clean_shutdown=False, recovery_point=0).close()

    def peakmem_open_after_unclean_shutdown(self, dirs, n):
        Log.open(dirs[n], clean_shutdown=False, recovery_point=0).close()

    def track_descriptors_after_unclean_open(self, dirs, n):
        before = len(os.listdir("/proc/self/fd"))
        log_ = Log.open(dirs[n], clean_shutdown=False, recovery_point=0)
        try:
            return len(os.listdir("/proc/self/fd")) - before
        finally:
            log_.close()
    track_descriptors_after_unclean_open.unit = "descriptors"


class Append:
    params = [100, 1000, 16000]
    param_names = ["batch_bytes"]

    def setup(self, size):
        self.data = batch_of(size)
        self.count = max(1, (8 * 1024 * 1024) // len(self.data))
        self.dir = tempfile.mkdtemp(prefix="kafkalog-asv-")
        self.log = Log.open(os.path.join(self.dir, "t-0"), {"segment.bytes": 1 << 30})

    def teardown(self, size):
        self.log.close()
        shutil.rmtree(self.dir)

    def time_append_8mb(self, size):
        for _ in range(self.count):
            self.log.append(self.data)

    def time_append_batches_8mb(self, size):
        """The same bytes in calls of up to 1,000 batches (Log.append_batches)."""
        for start in range(0, self.count, 1000):
            self.log.append_batches([self.data] * min(1000, self.count - start))


class AppendRecords:
    """Log.append([record]) of 20,000 one-record batches (Kafka: 200,000 in 478 ms, so 47.8 ms
    for 20,000), beside plain unbuffered writes of the same batch's bytes (the peer measured
    in the same run)."""
    count = 20_000

    def setup(self):
        self.records = [Record(key=b"k%06d" % i, value=b"x" * 100, timestamp=1 + i)
                        for i in range(self.count)]
        self.data = build_batch(self.records[:1])
        self.dir = tempfile.mkdtemp(prefix="kafkalog-asv-")
        self.log = Log.open(os.path.join(self.dir, "t-0"), {"segment.bytes": 1 << 30})

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir)

    def time_append_one_record(self):
        append = self.log.append
        for r in self.records:
            append([r])

    def time_plain_writes_of_the_same_bytes(self):
        with open(os.path.join(self.dir, "plain"), "wb", buffering=0) as f:
            for _ in range(self.count):
                f.write(self.data)


class ReadPaths:
    """bench-0 opened read-only: 100,000 Log.read(offset, 16 KiB) of random offsets (Kafka:
    396 ms), 10,000 Log.offset_for_timestamp (Kafka: 82 ms), Log.records() touching offset,
    key and value (Kafka's consume loop: 86 ms)."""
    timeout = 300

    def setup(self):
        self.log = Log.open(BENCH, read_only=True)
        rng = random.Random(1)
        self.offsets = [rng.randrange(self.log.log_end_offset) for _ in range(100_000)]
        self.stamps = [rng.randint(1700000000000, 1700000999999) for _ in range(10_000)]
        self.prebuilt = list(self.log.records())

    def teardown(self):
        self.log.close()

    def time_read_16k_random(self):
        read = self.log.read
        for offset in self.offsets:
            read(offset, 16384)

    def time_offset_for_timestamp_random(self):
        find = self.log.offset_for_timestamp
        for ts in self.stamps:
            find(ts)

    def time_records_touch(self):
        for r in self.log.records():
            r.offset
            r.key
            r.value

    def time_records_floor(self):
        """The same loop over Records already made: CPython's floor for a per-record loop,
        the peer of ``time_records_touch``."""
        for r in self.prebuilt:
            r.offset
            r.key
            r.value

    def time_record_tables(self):
        for _ in self.log.record_tables():
            pass


class SegmentRead:
    """The ``segment_read`` kernel under Log.read (Kafka's LogSegment.read in one call): 10,000
    random offsets of bench-0's first segment, 16 KiB each, from its offset index's view."""
    params = ["cython", "python"]
    param_names = ["impl"]

    def setup(self, impl):
        self.kernels = IMPLS[impl]
        self.buf = buffers(BENCH, first_only=True)[0]
        index = open_buffer(FIRST + ".index")
        self.view = self.kernels.IndexView(index, len(index) // 8, 0, OFFSET_KEY, OffsetPosition)
        self.offsets = random_targets(10_000, 185_700)

    def teardown(self, impl):
        self.view.release()

    def time_read_16k_random(self, impl):
        read, view, buf, end = self.kernels.segment_read, self.view, self.buf, len(self.buf)
        for offset in self.offsets:
            read(view, buf, offset, 0, 16384, end, True)


class FindTimestamp:
    """The ``find_timestamp`` kernel under Log.offset_for_timestamp (Kafka's
    FileRecords.searchForTimestamp): 1,000 random timestamps of bench-0's first segment, each
    searched from the position its time and offset index entries give, as the segment does."""
    params = ["cython", "python"]
    param_names = ["impl"]

    def setup(self, impl):
        self.kernels = IMPLS[impl]
        self.buf = buffers(BENCH, first_only=True)[0]
        batches = self.kernels.walk_batches(self.buf, validate_crc=False)[0]
        first, last = int(batches["base_timestamp"][0]), int(batches["max_timestamp"].max())
        offsets = OffsetIndex(FIRST + ".index", 0, writable=False)
        times = TimeIndex(FIRST + ".timeindex", 0, writable=False)
        self.targets = [(first + t, offsets.lookup(times.lookup(first + t).offset).position)
                        for t in random_targets(1000, last - first + 1)]
        offsets.close()
        times.close()

    def time_find_timestamp_random(self, impl):
        find, buf, end = self.kernels.find_timestamp, self.buf, len(self.buf)
        for timestamp, position in self.targets:
            find(buf, position, end, timestamp, 0)


class Retention:
    def setup(self):
        self.dir = tempfile.mkdtemp(prefix="kafkalog-asv-")
        self.log = Log.open(os.path.join(self.dir, "t-0"),
                            LogConfig({"segment.bytes": 64 * 1024, "retention.bytes": 1,
                                       "file.delete.delay.ms": 0}))
        data = batch_of(16000)
        for _ in range(400):
            self.log.append(data)

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir)

    def time_delete_old_segments(self):
        self.log.delete_old_segments()


class Compaction:
    """One cleaner pass over 100,000 records of 5,000 keys."""
    timeout = 300

    def setup(self):
        from kafkalog import Record
        self.dir = tempfile.mkdtemp(prefix="kafkalog-asv-")
        self.log = Log.open(os.path.join(self.dir, "c-0"),
                            {"segment.bytes": 1024 * 1024, "cleanup.policy": "compact",
                             "file.delete.delay.ms": 0})
        for start in range(0, 100_000, 100):
            self.log.append([Record(key=b"key-%05d" % ((start + i) % 5000), value=b"v" * 64,
                                    timestamp=1_700_000_000_000) for i in range(100)])
        self.log.roll()

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir)

    def time_compact(self):
        self.log.compact(now_ms=1_700_000_000_000)

    def track_map_bytes_per_key(self):
        stats = self.log.compact(now_ms=1_700_000_000_000)
        return stats.map_memory_bytes / max(1, stats.map_keys)


class CompactionKernels:
    """The cleaner's kernels over 100,000 records of 5,000 keys in 100-record batches: the
    offset map built and queried, and every batch rebuilt with 5% of its records kept."""
    params = [list(IMPLS)]
    param_names = ["impl"]

    def setup(self, impl):
        import numpy as np
        from kafkalog import Record, build_batch
        from kafkalog.records import decode_batches
        self.k = IMPLS[impl]
        self.buf = b"".join(
            build_batch([Record(key=b"key-%05d" % ((s + i) % 5000), value=b"v" * 64,
                                timestamp=1_700_000_000_000) for i in range(100)],
                        base_offset=s) for s in range(0, 100_000 if impl == "cython" else 5000, 100))
        self.batches = self.k.walk_batches(self.buf)[0]
        self.table = decode_batches(self.buf, self.batches)
        self.use = np.ones(len(self.table.records), dtype=np.uint8)
        self.keep = (np.arange(len(self.table.records)) % 20 == 0).astype(np.uint8)
        self.action = np.full(len(self.batches), 2, dtype=np.int8)
        self.horizon = np.full(len(self.batches), -1, dtype=np.int64)

    def time_offset_map_build_and_query(self, impl):
        import numpy as np
        slots = np.zeros((8192, 3), dtype=np.uint64)
        self.k.offset_map_put(slots, 0, 7000, self.table.data, self.table.records, self.use)
        self.k.offset_map_get(slots, self.table.data, self.table.records)

    def time_compact_batches(self, impl):
        self.k.compact_batches(self.buf, self.batches, self.keep, self.action, self.horizon)
