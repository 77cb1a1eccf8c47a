"""A LogManager at broker scale (issue #31), with fewer partitions than ``bench/broker_scale.py``
(2,000, each phase in a fresh process): creating idle partitions, opening them after a clean
shutdown, shutting them down, and what an idle or a written partition costs in real disk and
descriptors."""
import os
import shutil
import tempfile

from kafkalog import Record
from kafkalog.manager import LogManager

PARTITIONS = [200]


def _create(root, n):
    mgr = LogManager(root, background=False)
    for p in range(n):
        mgr.get_or_create_log("t", p)
    return mgr


def _real_disk(root):
    return sum(os.lstat(os.path.join(d, name)).st_blocks * 512
               for d, _, names in os.walk(root) for name in names)


class _Dirs:
    params = PARTITIONS
    param_names = ["partitions"]
    timeout = 300
    number = 1            # each sample needs its own state (a fresh dir, an open manager)
    repeat = 5
    warmup_time = 0

    def setup_cache(self):
        """One log dir per size, created and shut down cleanly."""
        made = {}
        for n in self.params:
            root = tempfile.mkdtemp(prefix=f"kafkalog-asv-broker-{n}-")
            _create(root, n).shutdown()
            made[n] = root
        return made


class CreatePartitions(_Dirs):
    def setup(self, made, n):
        self.root = tempfile.mkdtemp(prefix="kafkalog-asv-create-")
        self.mgr = None

    def teardown(self, made, n):
        if self.mgr is not None:
            self.mgr.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)

    def time_create(self, made, n):
        self.mgr = _create(self.root, n)


class OpenAfterCleanShutdown(_Dirs):
    def setup(self, made, n):
        self.mgr = None

    def teardown(self, made, n):
        if self.mgr is not None:
            self.mgr.shutdown()

    def time_open(self, made, n):
        self.mgr = LogManager(made[n], background=False)


class CleanShutdown(_Dirs):
    def setup(self, made, n):
        self.mgr = LogManager(made[n], background=False)

    def time_shutdown(self, made, n):
        self.mgr.shutdown()


class Footprint(_Dirs):
    def track_real_disk_kib_per_idle_partition(self, made, n):
        return _real_disk(made[n]) / n / 1024
    track_real_disk_kib_per_idle_partition.unit = "KiB"

    def track_descriptors_per_written_partition(self, made, n):
        root = tempfile.mkdtemp(prefix="kafkalog-asv-written-")   # (the cached dir stays idle)
        try:
            before = len(os.listdir("/proc/self/fd"))
            with _create(root, n) as mgr:
                for p in range(n):
                    mgr.get_log("t", p).append([Record(value=b"v" * 100)])
                held = len(os.listdir("/proc/self/fd")) - before
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return held / n
    track_descriptors_per_written_partition.unit = "descriptors"
