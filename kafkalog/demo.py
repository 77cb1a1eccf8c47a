"""Writes a sample partition (and a Kafka 0.7 one) with kafkalog, then dumps and verifies it:
``python -m kafkalog.demo [DIR]``."""
import os
import shutil
import sys

from kafkalog import Record, build_control_batch
from kafkalog.cli import main as cli_main
from kafkalog.log import Log
from kafkalog.log07 import Log07

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


def write_sample_07_partition(directory):
    """A Kafka 0.7 partition directory ``legacy_0`` (0.7's ``<topic>_<partition>`` spelling):
    plain messages and a gzip wrapper over two files."""
    part = os.path.join(directory, "legacy_0")
    shutil.rmtree(part, ignore_errors=True)
    os.makedirs(part)
    with Log07.open(part, config={"segment.bytes": 512}) as log:
        for i in range(0, 40, 4):
            log.append([f"event {n}".encode() for n in range(i, i + 4)],
                       codec="gzip" if i % 8 else "none")
    return part


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    directory = argv[0] if argv else "sample-data"
    part = write_sample_partition(directory)
    # beside it, not in it: the examples over the whole sample log dir stay about 0.8+ data
    print(f"wrote {part} and {write_sample_07_partition(directory + '-0.7')}")
    status = cli_main(["dump", "--records", "none", part])
    return status or cli_main(["verify", part])


if __name__ == "__main__":
    sys.exit(main())
