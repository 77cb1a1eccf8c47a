"""One plan per action (``kafkalog.spark.planning``): the plan made when PySpark asks the
data source for its partitions travels inside them and the workers do not plan again, for the
DataFrame API, SQL and streaming micro-batches (Spark Connect: test_spark_connect.py); where
PySpark keeps a DataFrame's partitions for every action (a scan pushing no filter), and past
``parallelPlanningThreshold``, each partition plans its share of the directories when it runs:
every directory once per action; each action reads the logs as of its own start.

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
from kafkalog.spark import datasource, planning
from kafkalog.spark.options import PRUNE_OPTION, Options

import test_spark
from test_spark import rows
from test_spark_options import T0, append, write_topic
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
    # registered even where PySpark finds it (ks.register would not): the registration
    # carries the environment
    spark.dataSource.register(datasource.data_source_class())

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
    spark.dataSource.register(datasource.data_source_class())


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


def test_a_scan_pushing_nothing_plans_each_directory_once_per_action(spark, plans, three):
    # PySpark keeps such a scan's partitions for every action of the DataFrame: they carry
    # shares of the listing, each planned by the task reading it, once per action
    shares = len(_reader(three).partitions())
    plans()
    df = spark.read.format("kafkalog").load(str(three))
    assert df.count() == 60
    assert plans() == {"share": shares}
    log = Log.open(three / "t-1")
    try:
        append(log, "t", 1, 3)
    finally:
        log.close()
    assert df.count() == 63                      # the same partitions, planned again
    assert plans() == {"share": shares}
    write_topic(three, "u", records=4)           # a partition made since: read by one share
    assert df.count() == 67


def test_a_micro_batch_is_planned_once(spark, plans, tmp_path):
    root = write_topic(tmp_path / "logs", "t", partitions=2, records=10)
    plans()
    df = read_stream(spark, root, startingOffsets="earliest", maxOffsetsPerTrigger="12")
    _, got = run_now(df, tmp_path / "checkpoint")
    assert got == [("t", p, o) for p in range(2) for o in range(10)]
    made = plans()
    assert set(made) == {"microbatch"} and made["microbatch"] == 2      # 12 + 8 offsets


def test_past_the_threshold_the_tasks_plan_their_shares(spark, plans, tmp_path):
    root = write_topic(tmp_path / "logs", "t", partitions=5, records=12,
                       config={"segment.bytes": 400})
    write_topic(tmp_path / "logs", "u", partitions=1, records=3)
    # a second broker's copy of two partitions: replicas stay together in one share
    other = tmp_path / "broker-2"
    for p in (1, 3):
        shutil.copytree(root / f"t-{p}", other / f"t-{p}")
    paths = [str(root), str(other)]
    groups = planning.directory_groups(paths, Options({}))
    assert [len(g.dirs) for g in groups] == [1, 2, 1, 2, 1, 1]
    plans()
    df = ks.read(spark, paths, parallelPlanningThreshold=2)
    assert plans() == {}                         # none when the DataFrame is made
    serial = ks.read(spark, paths)
    assert rows(df) == rows(serial)
    made = plans()
    assert made.pop("query") == 1 and set(made) == {"share"}    # the serial one's; shares
    log = Log.open(root / "t-4")
    try:
        append(log, "t", 4, 2)
    finally:
        log.close()
    assert df.count() == 65                      # each action plans the logs as they are
    assert plans() == made
    with pytest.raises(Exception, match="No offset matched"):     # in the tasks
        ks.read(spark, paths, parallelPlanningThreshold=2,
                startingTimestamp=str(2 ** 50)).count()


def test_what_is_planned_in_one_process():
    opts = Options({"parallelPlanningThreshold": "5"})
    assert planning.parallel_threshold(opts) == 5
    assert planning.parallel_threshold(Options({})) == 32    # Spark's default threshold
    with pytest.raises(InvalidConfigError, match="parallelPlanningThreshold must be positive"):
        Options({"parallelPlanningThreshold": "0"})


def test_shares_deal_whole_groups_by_bytes_and_split_the_big_ones():
    def group(name, size, segments=1):
        # segments of equal bytes, at base offsets 0, 100, 200, ...
        return planning.Group((name, 0), [name],
                              tuple((100 * i, size // segments) for i in range(segments)))

    def share(names, within=None):
        return planning.Share([(n, 0) for n in names], within)
    got = planning.shares([group("a", 10), group("b", 69, 3), group("c", 20),
                           group("d", 5), group("e", 100, 2)], 4)
    # b (69 of 204, a task's share 51) is read by 2 tasks, e by 2 (its segments), each a run
    # of segments from one base offset to the next; the rest packed whole into what is left,
    # the biggest first
    assert got == [share("b", (None, 200)), share("b", (200, None)),
                   share("e", (None, 100)), share("e", (100, None)), share("cad")]
    got = planning.shares([group(n, 1) for n in "abcde"], 2)
    assert sorted(k for s in got for k, _ in s.keys) == list("abcde") and len(got) == 2
    assert planning.shares([], 2) == []
    # minPartitions: a group cut past its segments at even offsets of its log's span, asked
    # only for the groups cut so
    asked = []

    def spans(keys):
        asked.extend(keys)
        return {("a", 0): (5, 35)}
    got = planning.shares([group("a", 30), group("b", 10)], 4, cut=True, spans=spans)
    assert got == [share("a", (None, 15)), share("a", (15, 25)), share("a", (25, None)),
                   share("b")]
    assert asked == [("a", 0)]
    # gone since listed: one share, which finds it gone
    assert planning.shares([group("a", 30)], 3, cut=True, spans=lambda keys: {}) == \
        [share("a", (None, None))]
    assert planning.share_options({"MinPartitions": "4", "subscribe": "a"}) == \
        {"subscribe": "a"}


def _reader(path, filters=(), **options):
    """The reader of ``format("kafkalog")`` as PySpark's planning worker gets it; with
    ``PRUNE_OPTION`` (``ks.read``'s) as its pushdown worker does, ``filters`` pushed."""
    source = datasource.data_source_class()({"path": str(path), **options})
    reader = source.reader(source.schema())
    if options.get(PRUNE_OPTION):
        assert list(reader.pushFilters(list(filters))) == []
    return reader


def _read_all(reader, parts):
    return sorted((p, o) for part in parts for batch in reader.read(part)
                  for p, o in zip(batch.column("partition").to_pylist(),
                                  batch.column("offset").to_pylist()))


def test_the_partitions_of_a_query_carry_its_tasks_and_reading_plans_nothing(
        three, monkeypatch):
    # the reader as PySpark's pushdown worker drives it (pushFilters, then partitions), then
    # read() of each partition, as a worker calls it, with planning made to fail
    reader = _reader(three, **{PRUNE_OPTION: "true", "maxBytesPerTask": "100"})
    parts = reader.partitions()
    assert [type(p).__name__ for p in parts] == ["PlannedPartition"] * len(parts)

    def no_plan(*args, **kwargs):
        raise AssertionError("a worker planned")
    monkeypatch.setattr(planning, "plan", no_plan)
    assert _read_all(reader, parts) == [(p, o) for p in range(3) for o in range(20)]


def test_shares_are_planned_once_each_by_the_task_reading_them(three, monkeypatch):
    # a scan pushing nothing (format("kafkalog") alone), and a query past the threshold:
    # every partition is planned once, by the partition reading it
    from pyspark.sql.datasource import EqualTo
    for selection, keys in (({"subscribe": "t"}, 3), ({"subscribePattern": "u.*"}, 0)):
        assert len(planning.directory_groups([str(three)], Options(selection))) == keys
    planned = []
    plan = planning.plan

    def counted(paths, *args, only, **kwargs):
        planned.extend(filter(only, [("t", p) for p in range(3)]))
        return plan(paths, *args, only=only, **kwargs)
    for options, kept in (({"maxBytesPerTask": "100"}, range(3)),
                          ({PRUNE_OPTION: "true", "parallelPlanningThreshold": "1",
                            "filters": [EqualTo(("partition",), 1)]}, [1])):
        reader = _reader(three, **options)
        parts = reader.partitions()
        assert {type(p).__name__ for p in parts} == {"SlotPartition"}
        monkeypatch.setattr(planning, "plan", counted)
        planned.clear()
        assert _read_all(reader, parts) == [(p, o) for p in kept for o in range(20)]
        assert sorted(planned) == [("t", p) for p in kept]
        monkeypatch.setattr(planning, "plan", plan)


class _Stage:
    """A stand-in for ``pyspark.TaskContext`` in a Python worker: the action's stage."""

    def __init__(self, stage):
        self.stage = stage

    def stageId(self):
        return self.stage


def _as_worker(monkeypatch, stage):
    """This process as a new Python worker running ``stage``: nothing cached from the driver
    (storage options, filesystems, the action's plans and listings). Not the worker's
    process-wide tuning (``gc.freeze``, ``mallopt``): the test process keeps its own."""
    import pyspark
    from kafkalog import storage
    storage.reset()
    datasource._ACTION_PLAN.clear()
    datasource._ACTION_LISTINGS.clear()
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: _Stage(stage)))
    monkeypatch.setattr(datasource, "tune_worker_process", lambda: None)


def _shipped(parts):
    """The partitions as a worker gets them (pickled by PySpark)."""
    from pyspark import cloudpickle
    return [cloudpickle.loads(cloudpickle.dumps(p)) for p in parts]


def test_a_worker_plans_its_shares_from_one_listing_of_the_bucket(
        s3, s3_calls, fresh_storage, tmp_path, monkeypatch):
    # a plain read (format("kafkalog"), no filter pushed) of 6 partitions: per action, a
    # worker lists the bucket's prefix once (<= 1,000 keys: one LIST) and reads the log dir's
    # checkpoints once, whatever the shares it runs; no LIST per directory, no HEAD
    import json
    from kafkalog.checkpoint import write_offset_checkpoint
    root = write_topic(tmp_path / "logs", "t", partitions=6, records=10)
    write_offset_checkpoint(root / "replication-offset-checkpoint",
                            {("t", p): 10 for p in range(6)})
    url = s3.upload(root, f"shares-{os.getpid()}")
    # segments below maxBytesPerTask: planned from the listing (a split asks the index)
    reader = _reader(url, storageOptions=json.dumps(s3.options), maxBytesPerTask="2000")
    parts = reader.partitions()
    assert len(parts) >= 4 and {type(p).__name__ for p in parts} == {"SlotPartition"}
    for stage in (1, 2):                       # two actions
        _as_worker(monkeypatch, stage)
        s3_calls.clear()
        assert _read_all(reader, _shipped(parts)) == [(p, o) for p in range(6)
                                                      for o in range(10)]
        # a GET of each checkpoint file of the log dir (recovery point, high watermark) and
        # one of each segment's bytes
        files = len(list(root.glob("*-checkpoint"))) + len(list(root.glob("t-*/*.log")))
        assert s3_calls == {"list_objects_v2": 1, "get_object": files}, s3_calls


def test_a_dataframe_is_checked_from_one_listing_of_the_bucket(s3, s3_calls, fresh_storage,
                                                               tmp_path):
    # made (read() and schema() check the paths and options): the path resolved, its groups
    # counted and its partitions' offsets found from one LIST, the checkpoints' GETs
    import json
    root = write_topic(tmp_path / "logs", "t", partitions=3, records=10)
    url = s3.upload(root, f"checked-{os.getpid()}")
    datasource._check([url], Options({"storageOptions": json.dumps(s3.options)}))
    assert s3_calls.get("list_objects_v2") == 1 and "head_object" not in s3_calls, s3_calls


@pytest.mark.parametrize("options", [
    {"assign": '{"t": [0, 2]}'},
    {"startingOffsets": '{"t": {"0": 3, "1": -2, "2": 15}}', "endingOffsets":
     '{"t": {"0": 9, "1": -1, "2": 17}}'},
    {"startingOffsetsByTimestamp": '{"t": {"0": %d, "1": %d, "2": %d}}'
     % (T0 + 4000, T0, T0 + 19000)},
    {"minPartitions": "6"},
], ids=["assign", "offsets", "by-timestamp", "minPartitions"])
@pytest.mark.parametrize("segment_bytes", [None, 400], ids=["whole", "parts"])
def test_options_naming_partitions_are_planned_by_shares(tmp_path, monkeypatch, options,
                                                         segment_bytes):
    # each share plans only its topic-partitions (with segments of 400 bytes, a part of
    # one: its offsets between two segments'); the rows are those of the query planned in
    # one process (its partitions carrying the tasks)
    three = write_topic(tmp_path / "logs", "t", partitions=3, records=20,
                        config=segment_bytes and {"segment.bytes": segment_bytes})
    planned_in_one = _reader(three, **{PRUNE_OPTION: "true", **options})
    want = _read_all(planned_in_one, planned_in_one.partitions())
    reader = _reader(three, maxBytesPerTask="100", **options)
    parts = reader.partitions()
    assert {type(p).__name__ for p in parts} == {"SlotPartition"}
    if "minPartitions" in options or segment_bytes:
        assert len(parts) >= 6                 # a partition dealt in parts
    planned = []
    plan = planning.plan
    # the partitions the options select, among which a share's plan picks its own
    selected = [g.key for g in planning.directory_groups([str(three)], Options(options))]

    def counted(paths, *args, only, **kwargs):
        planned.append(sorted(filter(only, selected)))
        return plan(paths, *args, only=only, **kwargs)
    monkeypatch.setattr(planning, "plan", counted)
    assert _read_all(reader, parts) == want
    assert planned == [sorted(p.keys) for p in parts]


def test_options_naming_partitions_are_checked_against_all_of_them(three):
    for options in ({"startingOffsets": '{"t": {"0": 3}}'},
                    {"endingOffsetsByTimestamp": '{"t": {"0": %d, "1": %d}}' % (T0, T0)}):
        with pytest.raises(InvalidConfigError, match="you must specify all"):
            _reader(three, **options).partitions()


def test_a_partition_created_later_is_read_by_one_share(tmp_path):
    # shares dealt from the first listing: a partition directory made since is planned by the
    # one share of whole groups its stable hash picks, in every later action
    root = write_topic(tmp_path / "logs", "t", partitions=4, records=20)
    reader = _reader(root, maxBytesPerTask="400")
    parts = reader.partitions()
    assert sum(p.route is not None for p in parts) >= 2
    write_topic(tmp_path / "logs", "u", partitions=2, records=3)
    log = Log.open(root / "t-9")
    try:
        append(log, "t", 9, 4)
    finally:
        log.close()
    got = _read_all(reader, parts)
    assert got == sorted([(p, o) for p in range(4) for o in range(20)] +
                         [(p, o) for p in range(2) for o in range(3)] + [(9, o) for o in range(4)])
    picks = [planning.share_picks(p.keys, p.route) for p in parts]
    for key in (("u", 0), ("u", 1), ("t", 9)):
        assert sum(pick(key) for pick in picks) == 1
    for p in range(4):
        assert sum(pick(("t", p)) for pick in picks) == sum(("t", p) in s.keys for s in parts)
    subscribed = _reader(root, maxBytesPerTask="400", subscribe="t")
    assert _read_all(subscribed, subscribed.partitions()) == \
        sorted([(p, o) for p in range(4) for o in range(20)] + [(9, o) for o in range(4)])


def _parts_read(reader, parts, first, between, monkeypatch):
    """The rows of ``parts`` read by two Python workers of one action: ``first`` (indexes)
    by one, then ``between()`` changes the log, then the others by a second worker whose
    listing is made after it."""
    _as_worker(monkeypatch, 1)
    got = _read_all(reader, _shipped([parts[i] for i in first]))
    between()
    _as_worker(monkeypatch, 1)
    return sorted(got + _read_all(reader, _shipped([p for i, p in enumerate(parts)
                                                    if i not in first])))


@pytest.mark.parametrize("change", ["first-deleted-read", "first-deleted", "rolled",
                                    "appended-cut"])
def test_the_parts_of_a_split_partition_read_each_offset_once(tmp_path, monkeypatch, change):
    # the parts of one partition dealt to several tasks are planned by different workers
    # from listings made at different moments: each reads the offsets the driver gave it
    cut = change == "appended-cut"
    root = write_topic(tmp_path / "logs", "t", records=40,
                       config=None if cut else {"segment.bytes": 400})
    reader = _reader(root, **({"minPartitions": "4"} if cut else {"maxBytesPerTask": "300"}))
    parts = reader.partitions()
    assert len(parts) >= 4 and all(p.keys == [("t", 0)] for p in parts)
    log = Log.open(root / "t-0")
    try:
        second = log.segments.higher(0).base_offset if not cut else None

        def between():
            if change.startswith("first-deleted"):
                log.delete_records(second)              # retention: the first segment goes
            else:
                append(log, "t", 0, 40 if cut else 8)   # a roll (or 40 more in the segment)
        # the parts read before the change
        first = {"first-deleted-read": [0], "first-deleted": range(1, len(parts)),
                 "rolled": [len(parts) - 1], "appended-cut": [0, 1]}[change]
        got = _parts_read(reader, parts, first, between, monkeypatch)
    finally:
        log.close()
    if change == "first-deleted":
        # part 0 planned after its segment went: the offsets still there, once
        assert got == [(0, o) for o in range(second, 40)]
    elif change == "appended-cut":
        # the last part planned after 40 more: all of them too
        assert got == [(0, o) for o in range(80)]
    else:
        # up to the log end the last part saw, once each
        assert got == [(0, o) for o in range(40)]


def test_a_partition_made_later_is_read_when_every_share_is_a_part(tmp_path):
    # one partition dealt in parts (no share of whole groups): a partition made since is
    # still read, by one share
    root = write_topic(tmp_path / "logs", "t", records=40, config={"segment.bytes": 400})
    reader = _reader(root, maxBytesPerTask="300")
    parts = reader.partitions()
    assert all(p.within is not None for p in parts)
    write_topic(root, "u", records=3)
    assert _read_all(reader, parts) == sorted([(0, o) for o in range(40)] +
                                              [(0, o) for o in range(3)])
    picks = [planning.share_picks(p.keys, p.route) for p in parts]
    assert sum(pick(("u", 0)) for pick in picks) == 1


@pytest.mark.parametrize("fail", [True, False])
def test_a_partition_gone_when_its_share_plans_is_data_loss(three, caplog, fail):
    # listed when the partitions were made, deleted before an action: as Spark's Kafka source
    # for a partition gone between planning and reading
    from kafkalog.errors import OffsetOutOfRangeError
    reader = _reader(three, maxBytesPerTask="100", failOnDataLoss=str(fail).lower())
    parts = reader.partitions()
    shutil.rmtree(three / "t-1")
    if fail:
        with pytest.raises(OffsetOutOfRangeError, match="t-1 listed .* gone"):
            _read_all(reader, parts)
        return
    with caplog.at_level("WARNING", logger="kafkalog"):
        assert _read_all(reader, parts) == [(p, o) for p in (0, 2) for o in range(20)]
    assert [r.getMessage()[:30] for r in caplog.records if r.levelname == "WARNING"] == \
        ["t-1 listed when the query's pa"]
