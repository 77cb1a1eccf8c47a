"""Writes a sample partition with kafkalog, then dumps it: ``python -m kafkalog.demo DIR``."""
import os
import sys

from kafkalog import Record, build_batch, build_control_batch
from kafkalog.cli import main as cli_main


def write_sample_partition(directory, batches=40):
    """A partition directory ``demo-0`` with one segment of batches in every codec."""
    part = os.path.join(directory, "demo-0")
    os.makedirs(part, exist_ok=True)
    codecs = ["none", "gzip", "snappy", "lz4", "zstd"]
    offset, chunks = 0, []
    for i in range(batches):
        recs = [Record(key=f"user-{(offset + j) % 17}".encode(),
                       value=f'{{"n": {offset + j}, "codec": "{codecs[i % 5]}"}}'.encode(),
                       timestamp=1_700_000_000_000 + offset + j,
                       headers=[("source", b"demo")] if j % 2 else ())
                for j in range(25)]
        chunks.append(build_batch(recs, base_offset=offset, compression=codecs[i % 5],
                                  producer_id=7, producer_epoch=0, base_sequence=offset,
                                  transactional=True, partition_leader_epoch=0))
        offset += len(recs)
    chunks.append(build_control_batch("commit", producer_id=7, producer_epoch=0,
                                      base_offset=offset, timestamp=1_700_000_100_000))
    with open(os.path.join(part, "00000000000000000000.log"), "wb") as f:
        f.write(b"".join(chunks))
    return part


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    directory = argv[0] if argv else "sample-data"
    part = write_sample_partition(directory)
    print(f"wrote {part}")
    return cli_main(["dump", "--records", "digest", part])


if __name__ == "__main__":
    sys.exit(main())
