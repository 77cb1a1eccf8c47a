"""PySpark 4 finds Python data sources in installed modules named ``pyspark_*`` that expose
``DefaultSource`` (``pyspark/sql/worker/lookup_data_sources.py``); this one makes
``spark.read.format("kafkalog")`` work without ``kafkalog.spark.register(spark)``."""
from kafkalog.spark.datasource import data_source_class

DefaultSource = data_source_class()

__all__ = ["DefaultSource"]
