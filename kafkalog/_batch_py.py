"""Twin of ``_batch.pxi``: the walked batch ``records.RecordBatch`` builds on, and the iterator
``iter_batches`` returns."""
import numpy as np

from kafkalog._layout import BATCH_DTYPE
from kafkalog._walk_py import walk_batches


class BatchView:
    """See ``_core.BatchView``."""
    __slots__ = ("_buffer", "_row", "_path", "_table", "_checked", "_crc_valid")

    def __init__(self, buffer, row, path=None, crc_valid=-1):
        if np.asarray(row, dtype=BATCH_DTYPE).size != 1:
            raise ValueError("one walked batch row expected")
        self._buffer, self._row, self._path, self._crc_valid = buffer, row, path, int(crc_valid)
        self._table, self._checked = None, False

    def is_valid(self):
        """See ``_core.BatchView.is_valid``."""
        row = np.asarray(self._row, dtype=BATCH_DTYPE).reshape(-1)[0]
        valid = self._crc_valid if self._crc_valid >= 0 else int(row["crc_valid"])
        if valid < 0:
            position, size = int(row["position"]), int(row["size"])
            one = walk_batches(self._buffer, position, position + size)[0]
            valid = int(one["crc_valid"][0]) if len(one) else 0
        return valid > 0


def batch_views(cls, start):
    """See ``_core.batch_views`` (here each made by ``cls(buffer, row, path)``)."""
    buffer, rows, path, finish = start()
    for row in np.ascontiguousarray(rows, dtype=BATCH_DTYPE):
        yield cls(buffer, row, path)
    finish()
