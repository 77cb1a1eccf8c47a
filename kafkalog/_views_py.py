"""Twin of ``_views.pxi``: held index views for one-call lookups."""
import numpy as np

from kafkalog._layout import OFFSET_KEY, OFFSET_VALUE, TIME_KEY, TIME_VALUE
from kafkalog._common_py import _wrap64
from kafkalog._index_py import _check_index, _value, index_lookup


class IndexView:
    """See ``_core.IndexView``."""

    def __init__(self, buf, entries, base_offset, kind, result_type):
        if kind not in (OFFSET_KEY, TIME_KEY):
            raise ValueError(f"kind must be OFFSET_KEY or TIME_KEY, not {kind}")
        self._buf = memoryview(buf).cast("B")
        self.entries = entries
        self.base_offset = base_offset
        self.kind = kind
        self._type = result_type

    def release(self):
        if self._buf is not None:
            self._buf.release()
            self._buf = None
        self.entries = 0

    def lookup(self, target):
        if self._buf is None:
            raise ValueError("index view released (the index was closed)")
        base = self.base_offset
        if self.kind == OFFSET_KEY:
            slot, rel, pos = index_lookup(self._buf, self.entries, OFFSET_KEY, target - base)
            return self._type(base, 0) if slot < 0 else self._type(base + rel, pos)
        slot, ts, rel = index_lookup(self._buf, self.entries, TIME_KEY, target)
        return self._type(-1, base) if slot < 0 else self._type(ts, base + rel)


def index_lookup_many(buf, entries, kind, base_offset, targets):
    """See ``_core.index_lookup_many``: the same search over the keys read once (a damaged
    index's unsorted keys give the same answers as there)."""
    if kind not in (OFFSET_KEY, TIME_KEY):
        raise ValueError(f"kind must be OFFSET_KEY or TIME_KEY, not {kind}")
    buf = _check_index(buf, entries, kind)
    shift = base_offset if kind == OFFSET_KEY else 0
    keys = [_wrap64(_value(buf, i, kind) + shift) for i in range(entries)]
    first, second = [], []
    for t in targets:
        t = int(t)
        if entries == 0 or keys[0] > t:
            first.append(base_offset if kind == OFFSET_KEY else -1)
            second.append(0 if kind == OFFSET_KEY else base_offset)
            continue
        lo, half = 0, entries          # largest slot with keys[slot] <= t
        while half > 1:
            step = half >> 1
            if keys[lo + step] <= t:
                lo += step
            half -= step
        first.append(keys[lo])
        second.append(_value(buf, lo, OFFSET_VALUE) if kind == OFFSET_KEY
                      else _wrap64(base_offset + _value(buf, lo, TIME_VALUE)))
    return np.array(first, dtype=np.int64), np.array(second, dtype=np.int64)
