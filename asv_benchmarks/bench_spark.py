"""Spark reads: bench-0's count() and sum(length(value)); actions over many small partitions,
where planning is most of the time (issue 40)."""
import os
import sys

from .common import BENCH, linked_log_dirs


def session():
    """The benchmark process's SparkSession (local[2]), made once."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[2]")
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class SparkRead:
    timeout = 600
    number = 1
    repeat = 3

    def setup(self):
        import kafkalog.spark as ks
        self.spark = session()
        self.ks = ks

    def time_count_and_sum_value_lengths(self):
        self.ks.read(self.spark, BENCH).selectExpr("count(*)", "sum(length(value))").collect()


class SparkPlanManyPartitions:
    """One action over P one-segment partitions (10 records each), the DataFrame made in
    each run as a job makes it: ``ks.read`` (planned when PySpark asks for the partitions,
    past ``parallelPlanningThreshold`` by the tasks, each its share) and
    ``format("kafkalog")`` (the tasks planning their shares, every action)."""
    params = ([100, 1000], ["ks.read", "format"])
    param_names = ["partitions", "reader"]
    timeout = 600
    number = 1
    repeat = 3

    def setup_cache(self):
        return linked_log_dirs("kafkalog-asv-spark-plan-", self.params[0])

    def setup(self, dirs, p, reader):
        import kafkalog.spark as ks
        self.spark = session()
        self.ks = ks

    def time_count(self, dirs, p, reader):
        df = self.ks.read(self.spark, dirs[p]) if reader == "ks.read" else \
            self.spark.read.format("kafkalog").load(dirs[p])
        df.count()
