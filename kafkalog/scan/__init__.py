"""The scan core: planning reads of partition directories and reading them into Arrow, shared by
``kafkalog.arrow`` and the Spark data source (``kafkalog.spark``). It imports no pyspark:
Spark's executors and Arrow users import it.

Rooms: ``discovery`` (the partition directories under the paths given, their replicas),
``planner`` (offset ranges and byte ranges from the engine's read-only view, split into
tasks), ``pushdown`` (the filters a query pushes to planning and reading), ``schema`` (the
Kafka source's columns as Arrow types), ``reader`` (a task's bytes through the kernels into
``pyarrow.RecordBatch`` es).
"""
