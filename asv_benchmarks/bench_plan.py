"""Discovery and planning of many local partitions (issue 40): a default read of P partition
directories, each one small segment, planned from one listing (``bench/plan_scale.py`` measures
more, incl. object storage behind a latency proxy)."""
from kafkalog.spark import plan

from .common import linked_log_dirs


class PlanLocalPartitions:
    """Seconds to plan a default read of P one-segment partitions (target: 100,000 in 10 s,
    i.e. <= 100 us per partition)."""
    params = [1000, 10000]
    param_names = ["partitions"]
    timeout = 600

    def setup_cache(self):
        return linked_log_dirs("kafkalog-asv-plan-", self.params)

    def time_plan_default_read(self, dirs, p):
        plan(dirs[p])
