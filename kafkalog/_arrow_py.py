"""Twin of ``_arrow.pxi``: gathering spans into Arrow-style columns."""
import numpy as np


def gather_spans(buf, positions, lengths):
    """See ``_core.gather_spans``."""
    buf = memoryview(buf).cast("B")
    if len(lengths) != len(positions):
        raise ValueError("positions and lengths differ in length")
    chunks, offsets, valid = [], [0], []
    for i, (p, n) in enumerate(zip(positions, lengths)):
        p, n = int(p), int(n)
        if n > 0 and (p < 0 or p + n > len(buf)):
            raise ValueError(f"span {i} lies outside the buffer")
        if n > 0:
            chunks.append(bytes(buf[p:p + n]))
        offsets.append(offsets[-1] + max(n, 0))
        valid.append(n >= 0)
    if offsets[-1] > 2**31 - 1:
        raise ValueError("spans exceed 2 GiB: split the input")
    return (np.array(offsets, dtype=np.int32),
            np.frombuffer(b"".join(chunks), dtype=np.uint8).copy(),
            np.array(valid, dtype=np.bool_))
