"""CRC32C inside the kernels: the SSE4.2 path (when the CPU has it) and the crc32c package
(the portable path) agree with the package on random buffers, and the batch walk reaches the
same verdicts on either path."""
import random

import numpy as np
import pytest
from crc32c import crc32c as package_crc32c

from kafkalog import build_batch, Record

from conftest import FIXTURES, LARGE_FIXTURES, PURE

# Around the kernel's block sizes: 8-byte words, 3 x 256-byte and 3 x 8192-byte rounds.
LENGTHS = list(range(0, 80)) + [255, 256, 257, 767, 768, 769, 1000, 4095, 4096, 4097,
                                 24575, 24576, 24577, 3 * 24576 + 13, 100_003]


@pytest.fixture(params=["hardware", "package"])
def crc_path(request, kernels):
    """Each kernel module; for the compiled one, each of its two CRC paths."""
    if kernels.__name__.endswith("_core_py"):
        if request.param == "hardware":
            pytest.skip("the pure-Python kernels have one path (the package)")
        yield kernels
        return
    if request.param == "hardware" and not kernels._crc_hardware():
        pytest.skip("this CPU has no SSE4.2")
    previous = kernels._crc_hardware()
    kernels._crc_hardware(request.param == "hardware")
    try:
        yield kernels
    finally:
        kernels._crc_hardware(previous)


def test_crc32c_matches_the_package_on_random_buffers(crc_path):
    rng = random.Random(17)
    for n in LENGTHS:
        data = rng.randbytes(n + 7)
        for start in (0, 1, 3, 7):           # unaligned starts exercise the loads
            chunk = data[start:start + n]
            assert crc_path.crc32c(chunk) == package_crc32c(chunk), (n, start)
            seed = rng.getrandbits(32)
            assert crc_path.crc32c(chunk, seed) == package_crc32c(chunk, seed), (n, start)


def test_crc32c_takes_any_buffer(crc_path):
    data = bytes(range(256)) * 40
    expected = package_crc32c(data)
    assert crc_path.crc32c(bytearray(data)) == expected
    assert crc_path.crc32c(memoryview(data)) == expected
    assert crc_path.crc32c(np.frombuffer(data, np.uint8)) == expected


def _batches(n, seed):
    rng = random.Random(seed)
    out = bytearray()
    offset = 0
    for _ in range(n):
        count = rng.randrange(1, 40)
        out += build_batch([Record(key=rng.randbytes(rng.randrange(0, 20)),
                                   value=rng.randbytes(rng.randrange(0, 3000)),
                                   timestamp=1_700_000_000_000 + i) for i in range(count)],
                           base_offset=offset)
        offset += count
    return bytes(out)


def test_walk_verdicts_agree_on_every_path(crc_path):
    data = _batches(30, 1)
    prefix = b"\0" * 5                       # batches at a non-zero position
    buf = prefix + data
    batches, status, stop, _ = crc_path.walk_batches(buf, start=len(prefix))
    assert len(batches) == 30 and (batches["crc_valid"] == 1).all()
    positions = batches["position"]
    for victim in (0, 13, 29):
        bad = bytearray(buf)
        bad[int(positions[victim]) + 70] ^= 0x01             # a byte of the records
        walked, status, stop, message = crc_path.walk_batches(bytes(bad), start=len(prefix))
        assert list(walked["crc_valid"]) == [1] * victim + [0] + [1] * (29 - victim)
        walked, status, stop, message = crc_path.walk_batches(bytes(bad), start=len(prefix),
                                                              stop_on_invalid=True)
        assert len(walked) == victim and stop == int(positions[victim])
        assert message == "record is corrupt (CRC mismatch)"


@pytest.mark.parametrize("name", ["plain-0", "legacy_v1-0", "legacy_v0-0", "corrupt_flip-0",
                                  "gzip-0", "txn-0"])
def test_walk_of_kafka_written_segments_agrees_with_the_twin(crc_path, name):
    from kafkalog import _core_py
    for log in sorted((FIXTURES / name).iterdir()):
        if log.suffix != ".log":
            continue
        data = log.read_bytes()
        ours = crc_path.walk_batches(data)
        twin = _core_py.walk_batches(data)
        assert (ours[0] == twin[0]).all() and ours[1:] == twin[1:]


@pytest.mark.skipif(PURE, reason="the compiled kernels only")
def test_hardware_path_on_a_large_segment():
    from kafkalog import _core
    if not _core._crc_hardware():
        pytest.skip("this CPU has no SSE4.2")
    log = LARGE_FIXTURES / "bench-0" / "00000000000000000000.log"
    data = log.read_bytes()
    assert _core.crc32c(data) == package_crc32c(data)
    batches = _core.walk_batches(data)[0]
    assert (batches["crc_valid"] == 1).all()
