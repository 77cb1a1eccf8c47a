"""Offset-index lookups: one call each and vectorized, sequential and random."""
import collections
import os

import numpy as np

from kafkalog._layout import OFFSET_KEY
from kafkalog.records import open_buffer

from .common import BENCH, IMPLS, random_targets

_Pair = collections.namedtuple("Pair", "offset position")


class IndexLookups:
    params = (["cython", "python"], ["random", "sequential"])
    param_names = ["impl", "order"]

    def setup(self, impl, order):
        self.kernels = IMPLS[impl]
        self.buf = open_buffer(os.path.join(BENCH, "00000000000000000000.index"))
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
