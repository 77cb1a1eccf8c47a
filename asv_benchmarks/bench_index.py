"""Offset-index lookups: one call each and vectorized, sequential and random."""
import collections

import numpy as np

from kafkalog import OffsetIndex, TimeIndex
from kafkalog._layout import OFFSET_KEY
from kafkalog.records import open_buffer

from .common import FIRST, IMPLS, random_targets

_Pair = collections.namedtuple("Pair", "offset position")


class IndexLookups:
    params = (["cython", "python"], ["random", "sequential"])
    param_names = ["impl", "order"]

    def setup(self, impl, order):
        self.kernels = IMPLS[impl]
        self.buf = open_buffer(FIRST + ".index")
        self.entries = len(self.buf) // 8
        targets = random_targets(100_000, 185_700)
        self.targets = sorted(targets) if order == "sequential" else targets
        self.array = np.array(self.targets, dtype=np.int64)
        self.view = self.kernels.IndexView(self.buf, self.entries, 0, OFFSET_KEY, _Pair)

    def teardown(self, impl, order):
        self.view.release()

    def time_single_lookups(self, impl, order):
        lookup = self.view.lookup
        for t in self.targets:
            lookup(t)

    def time_vectorized_lookups(self, impl, order):
        self.kernels.index_lookup_many(self.buf, self.entries, OFFSET_KEY, 0, self.array)


class IndexLookupsAsCalled:
    """``OffsetIndex(...).lookup(t)`` and ``TimeIndex(...).lookup(t)`` the way users call them
    (the attribute each time), 100,000 random targets, one call each (compiled kernels)."""

    def setup(self):
        self.offsets = OffsetIndex(FIRST + ".index", 0, writable=False)
        self.times = TimeIndex(FIRST + ".timeindex", 0, writable=False)
        self.targets = random_targets(100_000, 185_700)
        first, last = self.times.entry(0).timestamp, self.times.last_entry.timestamp
        self.ts_targets = [first - 10 + t % (last - first + 20)
                           for t in random_targets(100_000, 1 << 40, seed=2)]

    def teardown(self):
        self.offsets.close()
        self.times.close()

    def time_offset_index_lookup(self):
        for t in self.targets:
            self.offsets.lookup(t)

    def time_time_index_lookup(self):
        for t in self.ts_targets:
            self.times.lookup(t)
