"""Kafka 0.7 logs: the walk over ``.kafka`` entries with CRC32 (``walk_log07``) in either kernel
implementation, and ``Log07``'s writable open (0.7's check of the newest file) and reads of
its messages (plain and gzip wrappers decoded)."""
import os
import shutil
import tempfile

from kafkalog.files import log07_file_name
from kafkalog.log07 import Log07

from .common import IMPLS, log07_entries


class Walk07:
    """200,000 entries of 100-byte payloads (21 MB), walked with and without CRC32."""
    params = ["cython", "python"]
    param_names = ["impl"]

    def setup(self, impl):
        self.kernels = IMPLS[impl]
        self.buf = log07_entries(200_000, 100)

    def time_walk_with_crc(self, impl):
        self.kernels.walk_log07(self.buf, 0, -1, True)

    def time_walk_sizes_only(self, impl):
        self.kernels.walk_log07(self.buf, 0, -1, False)


class Log07Read:
    """A partition of two files: 100,000 plain entries, then 2,000 gzip wrappers of 50."""
    params = ["none", "gzip"]
    param_names = ["codec"]

    def setup(self, codec):
        self.dir = tempfile.mkdtemp(prefix="kafkalog-asv-")
        data = log07_entries(100_000, 100) if codec == "none" else \
            log07_entries(2_000, 100, codec="gzip", per_wrapper=50)
        with open(os.path.join(self.dir, log07_file_name(0)), "wb") as f:
            f.write(data)
        self.log = Log07.open(self.dir, read_only=True)

    def teardown(self, codec):
        self.log.close()
        shutil.rmtree(self.dir)

    def time_open_writable(self, codec):
        Log07.open(self.dir).close()

    def time_messages(self, codec):
        for _ in self.log.messages():
            pass
