"""A smoke test of an installed kafkalog (run by cibuildwheel and CI against the wheel, from
outside the source tree): the compiled kernels load, and records, indexes and the log work."""
import os
import sys
import tempfile


def main():
    import kafkalog
    from kafkalog import OffsetIndex, Record, build_batch, iter_batches
    from kafkalog.log import Log
    here = os.path.dirname(os.path.abspath(__file__))
    source = os.path.dirname(here)
    assert not os.path.abspath(kafkalog.__file__).startswith(source + os.sep + "kafkalog"), \
        f"imported the source tree ({kafkalog.__file__}), not the installed package"
    assert kafkalog.compiled(), "the compiled kernels did not load"
    data = b"".join(build_batch([Record(key=b"k%d" % i, value=b"v" * i, timestamp=i)
                                 for i in range(10)], base_offset=10 * b, compression=c)
                    for b, c in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]))
    records = [r for batch in iter_batches(data, validate_crc=True) for r in batch]
    assert [r.offset for r in records] == list(range(50)), records[:3]
    with tempfile.TemporaryDirectory() as d:
        with Log.open(os.path.join(d, "smoke-0"), {"segment.bytes": 2048,
                                                   "index.interval.bytes": 100}) as log:
            for _ in range(30):
                log.append(data)
            assert len(log.segments) > 1 and log.log_end_offset == 1500
            assert sum(1 for _ in log.records()) == 1500
        index = OffsetIndex(os.path.join(d, "smoke-0", "00000000000000000000.index"), 0,
                            writable=False)
        assert index.lookup(10_000).offset > 0
        index.close()
    print(f"kafkalog {kafkalog.__version__} from {os.path.dirname(kafkalog.__file__)}: "
          f"compiled kernels, records, indexes and log OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
