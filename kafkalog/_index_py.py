"""Twin of ``_index.pxi``: index search, the hot/cold "warm entries" binary search."""
import struct

import numpy as np

from kafkalog._layout import OFFSET_KEY, OFFSET_VALUE, TIME_KEY, TIME_VALUE

_ENTRY_SIZE = {OFFSET_KEY: 8, OFFSET_VALUE: 8, TIME_KEY: 12, TIME_VALUE: 12}
_GUESS_WINDOW = 8
_FIELD = {OFFSET_KEY: (">i", 0), OFFSET_VALUE: (">i", 4), TIME_KEY: (">q", 0), TIME_VALUE: (">i", 8)}


def _check_index(buf, entries, field):
    if field not in _ENTRY_SIZE:
        raise ValueError(f"unknown index field {field}")
    buf = memoryview(buf).cast("B")
    if entries < 0 or entries * _ENTRY_SIZE[field] > len(buf):
        raise ValueError(f"{entries} entries do not fit a buffer of {len(buf)} bytes")
    return buf


def _value(buf, slot, field):
    fmt, at = _FIELD[field]
    return struct.unpack_from(fmt, buf, slot * _ENTRY_SIZE[field] + at)[0]


def _search(buf, entries, field, target, upper):
    if entries == 0:
        return -1

    def binary_search(lo, hi):
        # The compiled search's interpolated first guess (see ``_core._binary_search``): the
        # same answer for sorted keys, and the same window for a damaged index's any keys.
        if hi - lo > 4 * _GUESS_WINDOW:
            first, last = _value(buf, lo, field), _value(buf, hi, field)
            span = float(last) - float(first)
            if first < target < last and span > 0:
                guess = lo + int((float(target) - float(first)) / span * float(hi - lo))
                if guess - _GUESS_WINDOW > lo and _value(buf, guess - _GUESS_WINDOW,
                                                         field) <= target:
                    lo = guess - _GUESS_WINDOW
                if guess + _GUESS_WINDOW < hi and _value(buf, guess + _GUESS_WINDOW,
                                                         field) > target:
                    hi = guess + _GUESS_WINDOW - 1
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            found = _value(buf, mid, field)
            if found > target:
                hi = mid - 1
            elif found < target:
                lo = mid
            else:
                return mid
        if not upper or _value(buf, lo, field) == target:
            return lo
        return -1 if lo == entries - 1 else lo + 1

    warm = 8192 // _ENTRY_SIZE[field]
    first_hot = max(0, entries - 1 - warm)
    if _value(buf, first_hot, field) < target:
        return binary_search(first_hot, entries - 1)
    if _value(buf, 0, field) > target:
        return 0 if upper else -1
    return binary_search(0, first_hot)


def index_search(buf, entries, field, target, upper=False):
    """See ``_core.index_search``."""
    buf = _check_index(buf, entries, field)
    return _search(buf, entries, field, target, upper)


def index_search_many(buf, entries, field, targets, upper=False):
    """See ``_core.index_search_many``."""
    buf = _check_index(buf, entries, field)
    return np.array([_search(buf, entries, field, int(t), upper) for t in targets], dtype=np.int64)


def index_entries(buf, entries, field_kind):
    """See ``_core.index_entries``."""
    if field_kind not in (OFFSET_KEY, TIME_KEY):
        raise ValueError(f"field_kind must be OFFSET_KEY or TIME_KEY, not {field_kind}")
    buf = _check_index(buf, entries, field_kind)
    keys = [_value(buf, i, field_kind) for i in range(entries)]
    values = [_value(buf, i, field_kind + 1) for i in range(entries)]
    return np.array(keys, dtype=np.int64), np.array(values, dtype=np.int64)


def index_valid_entries(buf, entry_size):
    """See ``_core.index_valid_entries``."""
    if entry_size <= 0:
        raise ValueError("entry_size must be positive")
    buf = memoryview(buf).cast("B")
    end = (len(buf) // entry_size) * entry_size
    data = bytes(buf[:end])
    last = len(data.rstrip(b"\0"))
    return (last + entry_size - 1) // entry_size


def index_lookup(buf, entries, field, target, upper=False):
    """See ``_core.index_lookup``."""
    buf = _check_index(buf, entries, field)
    slot = _search(buf, entries, field, target, upper)
    if slot < 0:
        return (-1, 0, 0)
    kind = OFFSET_KEY if field <= OFFSET_VALUE else TIME_KEY
    return (slot, _value(buf, slot, kind), _value(buf, slot, kind + 1))
