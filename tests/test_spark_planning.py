"""One plan per query (``kafkalog.spark.planning``): the plan made when PySpark asks the data
source for its partitions travels inside them and the workers do not plan again, for the
DataFrame API, SQL and streaming micro-batches (Spark Connect: test_spark_connect.py); each
action still reads the logs as of its own start; past ``parallelPlanningThreshold`` partition
directories ``kafkalog.spark.read`` plans with a Spark job, rows identical to the serial plan.

Plans are counted in every process of the session through ``KAFKALOG_COUNT_PLANS``, which
reaches the Python workers through the data source's registration (PySpark gives a registered
data source's workers the ``SparkContext.environment`` of its registration)."""
import collections
import os
import shutil

import pytest

import kafkalog.spark as ks
from kafkalog.errors import InvalidConfigError
from kafkalog.log import Log
from kafkalog.spark import planning
from kafkalog.spark.options import PRUNE_OPTION, Options

import test_spark
from test_spark import rows
from test_spark_options import append, write_topic
from test_spark_streaming import read_stream, run_now

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(scope="module")
def plans(spark, tmp_path_factory):
    """A function returning {kind: count} of the plans made since it was last called (in the
    driver, PySpark's planning workers and the executors' Python workers). Module-scoped:
    registering the data source again starts its Python workers afresh (a few seconds)."""
    name = tmp_path_factory.mktemp("plans") / "plans"
    saved_env = os.environ.get(planning.COUNT_ENV)
    os.environ[planning.COUNT_ENV] = str(name)
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment[planning.COUNT_ENV] = str(name)
    ks.register(spark)

    def made():
        kinds = collections.Counter(
            line.split()[1] for line in name.read_text().splitlines()) if name.exists() else {}
        name.unlink(missing_ok=True)
        return dict(kinds)
    yield made
    environment.clear()
    environment.update(saved)
    if saved_env is None:
        del os.environ[planning.COUNT_ENV]
    else:
        os.environ[planning.COUNT_ENV] = saved_env
    ks.register(spark)


@pytest.fixture
def three(tmp_path):
    return write_topic(tmp_path / "logs", "t", partitions=3, records=20)


def test_a_query_plans_once_and_each_action_sees_the_logs_of_its_start(spark, plans, three):
    plans()
    df = ks.read(spark, three)
    assert plans() == {}                         # its checks plan nothing
    assert df.count() == 60
    assert plans() == {"query": 1}               # no worker planned again
    log = Log.open(three / "t-0")
    try:
        append(log, "t", 0, 5)
    finally:
        log.close()
    assert df.count() == 65                      # the next action plans the logs as they are
    assert plans() == {"query": 1}
    assert df.union(df).count() == 130           # two scans, one plan each
    assert plans() == {"query": 2}
    df.createOrReplaceTempView("planned_once")
    try:
        got = spark.sql("SELECT partition, count(*) FROM planned_once WHERE offset >= 18 "
                        "GROUP BY partition ORDER BY partition").collect()
        assert [tuple(r) for r in got] == [(0, 7), (1, 2), (2, 2)]
        assert plans() == {"query": 1}
    finally:
        spark.catalog.dropTempView("planned_once")


def test_a_scan_pushing_nothing_keeps_slots_that_plan_in_the_workers(spark, plans, three):
    # PySpark keeps such a scan's partitions for every action of the DataFrame: the plan made
    # with them would be the first action's forever, so its slots plan when they run
    plans()
    df = spark.read.format("kafkalog").load(str(three))
    assert df.count() == 60
    made = plans()
    assert made.get("slots") == 1 and made.get("worker", 0) >= 1 and "query" not in made
    log = Log.open(three / "t-1")
    try:
        append(log, "t", 1, 3)
    finally:
        log.close()
    assert df.count() == 63
    assert "slots" not in plans()                # the same partitions, planned again


def test_a_micro_batch_is_planned_once(spark, plans, tmp_path):
    root = write_topic(tmp_path / "logs", "t", partitions=2, records=10)
    plans()
    df = read_stream(spark, root, startingOffsets="earliest", maxOffsetsPerTrigger="12")
    _, got = run_now(df, tmp_path / "checkpoint")
    assert got == [("t", p, o) for p in range(2) for o in range(10)]
    made = plans()
    assert set(made) == {"microbatch"} and made["microbatch"] == 2      # 12 + 8 offsets


def test_past_the_threshold_a_spark_job_plans(spark, plans, tmp_path):
    plans()
    root = write_topic(tmp_path / "logs", "t", partitions=5, records=12,
                       config={"segment.bytes": 400})
    write_topic(tmp_path / "logs", "u", partitions=1, records=3)
    # a second broker's copy of two partitions: replicas stay together in one share
    other = tmp_path / "broker-2"
    for p in (1, 3):
        shutil.copytree(root / f"t-{p}", other / f"t-{p}")
    paths = [str(root), str(other)]
    serial = ks.plan(paths, {})
    groups = planning.directory_groups(paths, Options({}))
    assert len(groups) == 6 and [len(g) for g in groups] == [1, 2, 1, 2, 1, 1]
    assert planning.spark_plan(spark, groups, {}, 2) == serial
    assert plans() == {"share": 4}
    df = ks.read(spark, paths, parallelPlanningThreshold=2)
    assert plans() == {"share": 4}               # when the DataFrame is made
    assert rows(df) == rows(ks.read(spark, paths))
    assert plans() == {"query": 1}               # the serial DataFrame's; none for df
    with pytest.raises(InvalidConfigError, match="No offset matched"):   # kafkalog's error
        ks.read(spark, paths, parallelPlanningThreshold=2, startingTimestamp=str(2 ** 50))
    # subscribe picks the directories before the threshold is compared
    assert planning.directory_groups(paths, Options({"subscribe": "u"})) == [[str(root / "u-0")]]


def test_what_a_spark_job_does_not_plan():
    opts = Options({"parallelPlanningThreshold": "5"})
    assert planning.parallel_threshold(opts) == 5
    assert planning.parallel_threshold(Options({})) == 32    # Spark's default threshold
    with pytest.raises(InvalidConfigError, match="parallelPlanningThreshold must be positive"):
        Options({"parallelPlanningThreshold": "0"})
    # options naming partitions are checked against all of them: one process plans
    for options in ({"assign": '{"t": [0]}'}, {"startingOffsets": '{"t": {"0": 1}}'},
                    {"endingOffsets": {"t": {"0": 1}}}, {"minPartitions": "4"}):
        assert planning.directory_groups(["/nonexistent"], Options(options)) is None


def test_a_plan_file_that_is_gone_is_a_typed_error(tmp_path):
    with pytest.raises(InvalidConfigError, match="call kafkalog.spark.read again"):
        planning.load_plan(str(tmp_path / "gone.json"))
    (tmp_path / "other.json").write_text('{"a": 1}')
    with pytest.raises(InvalidConfigError, match="holds no plan"):
        planning.load_plan(str(tmp_path / "other.json"))
    tasks = [{"topic": "t", "partition": 0, "start_pos": 0}]
    assert planning.load_plan(planning.save_plan(tasks)) == tasks


def test_the_partitions_of_a_query_carry_its_tasks_and_reading_plans_nothing(
        three, monkeypatch):
    # the reader as PySpark's pushdown worker drives it (pushFilters, then partitions), then
    # read() of each partition, as a worker calls it, with planning made to fail
    from kafkalog.spark import datasource
    source = datasource.data_source_class()({"path": str(three), PRUNE_OPTION: "true",
                                             "maxBytesPerTask": "100"})
    reader = source.reader(source.schema())
    assert list(reader.pushFilters([])) == []
    parts = reader.partitions()
    assert [type(p).__name__ for p in parts] == ["PlannedPartition"] * len(parts)

    def no_plan(*args, **kwargs):
        raise AssertionError("a worker planned")
    monkeypatch.setattr(planning, "plan", no_plan)
    monkeypatch.setattr(datasource, "_action_plan", no_plan)
    got = sorted((p, o) for part in parts for batch in reader.read(part)
                 for p, o in zip(batch.column("partition").to_pylist(),
                                 batch.column("offset").to_pylist()))
    assert got == [(p, o) for p in range(3) for o in range(20)]
