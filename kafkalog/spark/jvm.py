"""The JVM reader of ``kafkalog.spark.read``: ``kafkalog-spark.jar`` (built from ``jvm/`` by
``jvm/build.sh``, shipped in the wheel) holds a Spark DataSource V2,
``io.kafkalog.spark.KafkalogSource``, that reads planned tasks into columnar batches in the
executors' JVMs, with no Python worker and no Arrow hand-over.

Loading: build the session with the jar, ``SparkSession.builder.config("spark.jars",
kafkalog.spark.jar_path())``, and every thread sees it. Otherwise ``unavailable`` adds it to a
running session with ``ADD JAR``, which reaches the calling Python thread only (PySpark pins
each Python thread to a JVM thread, and ``ADD JAR`` sets that thread's class loader).

Planning: the DataFrame's table holds a Py4J callback into the driver's Python process
(``_Planner``, an ``io.kafkalog.spark.TaskPlanner``); Spark calls it when it plans the scan,
i.e. on every action, so each action reads the logs as they are then. The filters Spark pushed
into the scan come with the call (``io.kafkalog.spark.PushedFilters``' JSON) and prune the plan
(``planner.Pushdown``); Spark applies them all again to the rows read.
"""
from __future__ import annotations

import datetime
import json
import os
from typing import TYPE_CHECKING, Any, Callable

from kafkalog.scan.pushdown import EPOCH, Pushdown

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

SOURCE = "io.kafkalog.spark.KafkalogSource"
_JAR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kafkalog-spark.jar")
_HOW = 'build the session with .config("spark.jars", kafkalog.spark.jar_path())'


def jar_path() -> str | None:
    """The path of the JVM reader's jar shipped with kafkalog, or None when this installation
    has none (it was built where ``javac`` was missing)."""
    return _JAR if os.path.isfile(_JAR) else None


def _loadable(jvm: Any) -> bool:
    from py4j.protocol import Py4JJavaError  # type: ignore[import-untyped]
    # the class loader Spark's format() looks data sources up with, on this thread
    loader = jvm.org.apache.spark.util.Utils.getContextOrSparkClassLoader()
    try:
        jvm.java.lang.Class.forName(SOURCE, False, loader)
    except Py4JJavaError:
        return False
    return True


def unavailable(spark: SparkSession) -> str | None:
    """None when the JVM reader can be used from this thread with ``spark`` (its classes
    load; the bundled jar is added with ``ADD JAR`` if they did not); else why not."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:
        return "this SparkSession has no JVM in this process (Spark Connect)"
    if _loadable(jvm):
        return None
    jar = jar_path()
    if jar is None:
        return ("this kafkalog installation has no kafkalog-spark.jar (javac was missing when "
                "it was built; jvm/build.sh builds it)")
    spark.sql(f"ADD JAR '{jar}'")
    if _loadable(jvm):
        return None
    return f"{SOURCE} does not load on this thread after ADD JAR; {_HOW}"


_COMPARISONS = ("EqualTo", "EqualNullSafe", "GreaterThan", "GreaterThanOrEqual", "LessThan",
                "LessThanOrEqual")


def _pyspark_filter(node: dict[str, Any]) -> Any:
    """The ``pyspark.sql.datasource`` filter of one node of ``PushedFilters``' JSON (what
    ``Pushdown.from_filters`` reads); ``ValueError`` for a node it never sends."""
    from pyspark.sql import datasource as filters
    kind = node["kind"]
    if kind == "Not":
        return filters.Not(_pyspark_filter(node["child"]))
    column = node["column"]

    def literal(value: Any) -> Any:
        # timestamps travel as microseconds since the epoch; Spark's literals are aware
        if column == "timestamp" and value is not None:
            return EPOCH + datetime.timedelta(microseconds=value)
        return value

    if kind == "IsNotNull":
        return filters.IsNotNull((column,))
    if kind == "In":
        return filters.In((column,), tuple(literal(v) for v in node["values"]))
    if kind in _COMPARISONS:
        return getattr(filters, kind)((column,), literal(node["value"]))
    raise ValueError(f"kafkalog's JVM reader sent an unknown filter: {node!r}")


class _Planner:
    """The ``io.kafkalog.spark.TaskPlanner`` the JVM calls back: ``plan_json(pushdown)`` is
    the JSON list of Spark partitions, each a list of planner tasks, pruned by the filters
    pushed into the scan."""

    def __init__(self, plan_json: Callable[[Pushdown], str]) -> None:
        self._plan_json = plan_json

    def planTasks(self, filters_json: str) -> str:  # noqa: N802  (the Java interface's name)
        # the filters Pushdown leaves out are no loss: Spark applies every filter after the scan
        pushdown, _ = Pushdown.from_filters(_pyspark_filter(f) for f in json.loads(filters_json))
        return self._plan_json(pushdown)

    class Java:
        implements = ["io.kafkalog.spark.TaskPlanner"]


def dataframe(spark: SparkSession, plan_json: Callable[[Pushdown], str],
              include_headers: bool) -> DataFrame:
    """A DataFrame read by the JVM reader, planned by ``plan_json(pushdown)`` on every action
    (call ``unavailable`` first, from the same thread)."""
    from pyspark.java_gateway import ensure_callback_server_started
    ensure_callback_server_started(spark.sparkContext._gateway)
    # The table Spark makes in load() takes the planner from the registry and holds it as long
    # as the DataFrame's plan lives.
    jvm: Any = spark._jvm
    planners = jvm.io.kafkalog.spark.Planners
    planner_id = planners.register(_Planner(plan_json))
    try:
        return (spark.read.format(SOURCE).option("planner", planner_id)
                .option("includeHeaders", str(include_headers).lower()).load())
    finally:
        planners.discard(planner_id)     # taken by load(), else left waiting for nothing
