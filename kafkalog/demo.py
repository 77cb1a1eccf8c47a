"""Writes a sample partition with kafkalog, then dumps and verifies it:
``python -m kafkalog.demo [DIR]``."""
import os
import shutil
import sys

from kafkalog import Record, build_control_batch
from kafkalog.cli import main as cli_main
from kafkalog.log import Log

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def write_sample_partition(directory, batches=60):
    """A partition directory ``demo-0``: batches in every codec over several segments, an
    aborted transaction, closed cleanly."""
    part = os.path.join(directory, "demo-0")
    shutil.rmtree(part, ignore_errors=True)
    with Log.open(part, {"segment.bytes": 8192, "index.interval.bytes": 1024}) as log:
        for i in range(batches):
            start = log.log_end_offset
            records = [Record(key=f"user-{(start + j) % 17}".encode(),
                              value=f'{{"n": {start + j}, "codec": "{CODECS[i % 5]}"}}'.encode(),
                              timestamp=1_700_000_000_000 + start + j,
                              headers=[("source", b"demo")] if j % 2 else ())
                       for j in range(25)]
            log.append(records, compression=CODECS[i % 5])
        log.append([Record(value=b"never committed")], producer_id=7, producer_epoch=0,
                   base_sequence=0, transactional=True)
        log.append(build_control_batch("abort", producer_id=7, producer_epoch=0,
                                       coordinator_epoch=1))
        log.flush()
    return part


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    directory = argv[0] if argv else "sample-data"
    part = write_sample_partition(directory)
    print(f"wrote {part}")
    status = cli_main(["dump", "--records", "none", part])
    return status or cli_main(["verify", part])


if __name__ == "__main__":
    sys.exit(main())
