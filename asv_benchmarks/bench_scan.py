"""Batch walk with CRC validation and record decoding on Kafka-written data."""
import numpy as np

from kafkalog._kernels import walk_batches
from kafkalog.records import TYPE_OBJECTS, decode_batches, iter_batches

from .common import BENCH, BENCH_LZ4, IMPLS, buffers, logs


class WalkBatches:
    params = ["cython", "python"]
    param_names = ["impl"]

    def setup(self, impl):
        self.kernels = IMPLS[impl]
        # The pure-Python walk is timed on the first segment only (16.8 MB).
        self.bufs = buffers(BENCH, first_only=impl == "python")

    def time_walk_with_crc(self, impl):
        for b in self.bufs:
            self.kernels.walk_batches(b)

    def time_walk_without_crc(self, impl):
        for b in self.bufs:
            self.kernels.walk_batches(b, validate_crc=False)

    def time_crc32c(self, impl):
        for b in self.bufs:
            self.kernels.crc32c(b)


class BatchRecords:
    """``for r in batch`` through the ``batch_records`` kernel (one call per batch), reading
    every field: the first segment of bench-0 (185,700 records)."""
    params = ["cython", "python"]
    param_names = ["impl"]
    timeout = 120

    def setup(self, impl):
        self.kernels = IMPLS[impl]
        self.buf = buffers(BENCH, first_only=True)[0]
        self.rows = list(walk_batches(self.buf)[0])

    def time_read_every_field(self, impl):
        for row in self.rows:
            for r in self.kernels.batch_records(self.buf, row, TYPE_OBJECTS):
                r.offset, r.timestamp, r.key, r.value


class TableRecords:
    """``for r in table`` through the ``table_records`` kernel (the lazy Record iterator)
    over the first segment of bench-0 decoded once (185,700 records), reading offset, key and
    value."""
    params = ["cython", "python"]
    param_names = ["impl"]
    timeout = 120

    def setup(self, impl):
        self.kernels = IMPLS[impl]
        buf = buffers(BENCH, first_only=True)[0]
        self.table = decode_batches(buf, walk_batches(buf)[0])

    def time_read_offset_key_value(self, impl):
        t = self.table
        for r in self.kernels.table_records(t.data, t.records, t.headers, t.timestamp_type,
                                            TYPE_OBJECTS):
            r.offset, r.key, r.value


class NaturalLoop:
    """The loops users write over bench-0 (compiled kernels: ``iter_batches`` takes the
    kernels ``_kernels`` chose at import): ``for b in iter_batches(path): for r in b``,
    reading every field; keeping the records; reading keys and values; and Kafka's
    batch-validity loop, ``b.is_valid()`` for every batch."""
    params = ["first segment", "all"]
    param_names = ["logs"]
    timeout = 120

    def setup(self, which):
        self.paths = logs(BENCH)[:1] if which == "first segment" else logs(BENCH)

    def time_read_every_field(self, which):
        for path in self.paths:
            for b in iter_batches(path):
                for r in b:
                    r.offset, r.timestamp, r.key, r.value

    def time_keep_records(self, which):
        out = []
        for path in self.paths:
            for b in iter_batches(path):
                for r in b:
                    r.offset, r.timestamp, r.key, r.value
                    out.append(r)

    def time_read_keys_and_values(self, which):
        n = 0
        for path in self.paths:
            for b in iter_batches(path):
                for r in b:
                    n += len(r.key) + len(r.value)

    def time_check_batches_valid(self, which):
        for path in self.paths:
            for b in iter_batches(path):
                b.is_valid()


class DecodeRecords:
    params = ["cython", "python"]
    param_names = ["impl"]
    timeout = 120

    def setup(self, impl):
        self.kernels = IMPLS[impl]
        self.bufs = buffers(BENCH, first_only=impl == "python")
        self.regions = []
        for b in self.bufs:
            w = walk_batches(b, validate_crc=False)[0]
            self.regions.append((b, w["position"] + 61, w["position"] + w["size"].astype(np.int64),
                                 w["base_offset"].copy(), w["base_timestamp"].copy(),
                                 w["record_count"].astype(np.int64)))

    def time_decode_columnar(self, impl):
        for r in self.regions:
            self.kernels.decode_v2_records(*r)


class DecodeToRecords:
    """All 1M records of bench-0 to Record objects (compiled kernels)."""

    def setup(self):
        self.tables = [decode_batches(b, walk_batches(b, validate_crc=False)[0])
                       for b in buffers(BENCH)]

    def time_make_records(self):
        for t in self.tables:
            t.to_records()


class DecodeLz4:
    def setup(self):
        self.bufs = buffers(BENCH_LZ4)

    def time_decode_lz4_columnar(self):
        for b in self.bufs:
            decode_batches(b, walk_batches(b, validate_crc=False)[0])
