"""The Spark read of bench-0: count() and sum(length(value))."""
import os
import sys

from .common import BENCH


class SparkRead:
    timeout = 600
    number = 1
    repeat = 3

    def setup(self):
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        from pyspark.sql import SparkSession
        import kafkalog.spark as ks
        self.spark = (SparkSession.builder.master("local[2]")
                      .config("spark.ui.enabled", "false")
                      .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        self.ks = ks

    def time_count_and_sum_value_lengths(self):
        self.ks.read(self.spark, BENCH).selectExpr("count(*)", "sum(length(value))").collect()
