"""The Spark reader and ``kafkalog.read_arrow`` on Kafka data in object storage (the session's
moto S3 server on 127.0.0.1, spoken to over HTTP by s3fs/botocore): ``kafkalog.spark.read`` and
``spark.read.format("kafkalog")`` with ``storageOptions``, ``s3://`` and ``s3a://``, and with
the AWS_* environment only, return exactly the rows of the local copy; a task reads only the
blocks of its byte range; credentials stay out of the planned tasks' rows and the query plan.

The Spark tests share the session of ``test_spark.py``. Its Python workers were started with
the driver's environment of that time, so the environment-only Spark test gives the AWS_*
variables to new workers through ``SparkContext.environment`` (what ``spark.executorEnv.*``
sets at start; ``mapInArrow`` functions carry it). The data source is registered once with the
environment of its registration, so its environment-only path is tested through ``plan`` and
``read_task`` without Spark."""
import json
import os
import shutil

import pytest

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")
pytest.importorskip("pyspark")

import kafkalog  # noqa: E402
import kafkalog.spark as ks  # noqa: E402
from kafkalog import storage, storage_backend  # noqa: E402
from kafkalog.errors import InvalidConfigError, OffsetOutOfRangeError  # noqa: E402
from kafkalog.files import LOG_SUFFIX, file_path  # noqa: E402

import test_spark  # noqa: E402
from test_spark import rows  # noqa: E402

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")

COMMITTED = {"kafka.isolation.level": "read_committed"}
SECRET = "kafkalog-test-secret-never-logged"


@pytest.fixture(autouse=True)
def _fresh_storage():
    storage.reset()
    yield
    storage.reset()


def _options_json(s3, **more):
    # moto accepts any key pair: a distinctive secret to look for in plans and rows
    return json.dumps(dict(s3.options, key="AKIAKAFKALOGTEST0001", secret=SECRET, **more))


def _arrow_rows(table):
    d = table.to_pydict()
    return sorted(zip(d["topic"], d["partition"], d["offset"], d["key"], d["value"],
                      [None if t is None else t.timestamp() for t in d["timestamp"]]))


# ------------------------------------------------------------------------------------ Spark
@pytest.fixture(scope="module")
def local_rows(spark, s3_kafkalog_dir):
    """``local_rows(**options)``: the rows of a read of the local copy, each read once for the
    module (the tests of both schemes compare with them)."""
    read = {}

    def get(**options):
        key = json.dumps(options, sort_keys=True)
        if key not in read:
            read[key] = rows(ks.read(spark, [s3_kafkalog_dir[0]], **options),
                             headers=bool(options.get("includeHeaders")))
        return read[key]
    return get


@pytest.mark.parametrize("scheme", ["s3", "s3a"])
def test_read_matches_the_local_copy(spark, s3, s3_kafkalog_dir, local_rows, scheme):
    _, url = s3_kafkalog_dir
    url = url.replace("s3://", f"{scheme}://")
    options = _options_json(s3)
    remote = []
    for extra in ({}, COMMITTED, {"includeHeaders": "true"}):
        remote.append(rows(ks.read(spark, [url], storageOptions=options, **extra),
                           headers=bool(extra.get("includeHeaders"))))
        expected = local_rows(**extra)
        assert remote[-1] == expected and len(expected) > 1000
    # read_committed drops the aborted transactions' records (the reads above: no new ones)
    assert len(remote[1]) < len(remote[0])


def test_data_source_matches_the_local_copy(spark, s3, s3_kafkalog_dir):
    local, url = s3_kafkalog_dir
    options = _options_json(s3)
    starting = json.dumps({"events": {"0": 123, "1": 401}})
    for extra in ({}, COMMITTED, {"startingOffsets": starting, "endingOffsets": "latest",
                                  "maxBytesPerTask": "6000"}):
        local_reader = spark.read.format("kafkalog")
        for k, v in extra.items():
            local_reader = local_reader.option(k, v)
        expected = rows(local_reader.load(local))         # read once for both schemes
        for scheme in ("s3", "s3a"):
            reader = spark.read.format("kafkalog").option("storageOptions", options)
            for k, v in extra.items():
                reader = reader.option(k, v)
            remote = rows(reader.option("path", url.replace("s3://", f"{scheme}://")).load())
            assert remote == expected
            assert remote


def test_a_partition_url_and_a_prefix_of_log_dirs(spark, s3, s3_kafkalog_dir):
    local, url = s3_kafkalog_dir
    options = _options_json(s3)
    one = rows(ks.read(spark, [f"{url}/events-1"], storageOptions=options))
    assert one == rows(ks.read(spark, [os.path.join(local, "events-1")]))
    # the bucket path above the log dir: partition directories are found by listing
    above = url.rsplit("/", 1)[0]
    assert rows(ks.read(spark, above, storageOptions=options, subscribe="events")) == \
        rows(ks.read(spark, local))


def test_credentials_stay_out_of_rows_and_plans(spark, s3, s3_kafkalog_dir):
    _, url = s3_kafkalog_dir
    options = _options_json(s3)
    df = ks.read(spark, [url], storageOptions=options)
    # the rows of planned tasks (shuffled to the readers) hold no credentials
    tasks_df = df._jdf.queryExecution().toString()
    assert SECRET not in tasks_df
    ds = spark.read.format("kafkalog").option("storageOptions", options).load(url)
    assert SECRET not in ds._jdf.queryExecution().toString()
    assert rows(df) == rows(ds)


def test_read_with_the_aws_environment_only(spark, s3, s3_kafkalog_dir, monkeypatch):
    """No storageOptions: the driver plans with its AWS_* environment, the executors read with
    theirs (given to new Python workers through SparkContext.environment)."""
    local, url = s3_kafkalog_dir
    env = s3.use_environment(monkeypatch)
    environment = spark.sparkContext.environment
    saved = dict(environment)
    environment.update(env)
    try:
        remote = rows(ks.read(spark, [url], **COMMITTED))
    finally:
        environment.clear()
        environment.update(saved)
    assert remote == rows(ks.read(spark, [local], **COMMITTED)) and remote


def test_bad_storage_options_are_refused_up_front(spark, s3, s3_kafkalog_dir):
    _, url = s3_kafkalog_dir
    with pytest.raises(InvalidConfigError, match="JSON object") as e:
        ks.read(spark, [url], storageOptions=f'["{SECRET}"]')
    assert SECRET not in str(e.value)


# ------------------------------------------------------------------- planning and read_task
def test_plan_and_read_task_with_the_environment_only(s3, s3_kafkalog_dir, monkeypatch):
    """The data source's executors read through ``plan`` + ``read_task`` in their process:
    with no options, the AWS_* environment (incl. AWS_ENDPOINT_URL)."""
    import pyarrow as pa
    local, url = s3_kafkalog_dir
    s3.use_environment(monkeypatch)
    tasks = ks.plan([url], COMMITTED)
    assert tasks and all(t["storage_options"] is None for t in tasks)
    assert all(t["dir"].startswith("s3://") for t in tasks)
    storage.reset()                     # an executor: nothing configured but the environment
    remote = pa.Table.from_batches([b for t in tasks for b in ks.read_task(t)],
                                   schema=ks.arrow_schema())
    assert _arrow_rows(remote) == _arrow_rows(kafkalog.read_arrow(local, **COMMITTED))


def test_read_task_fetches_only_its_byte_range(s3, s3_kafkalog_dir, monkeypatch):
    local, url = s3_kafkalog_dir
    options = json.loads(_options_json(s3))
    monkeypatch.setattr(storage_backend, "BLOCK_SIZE", 1024)
    tasks = ks.plan([f"{url}/events-0"], {"maxBytesPerTask": "4000"}, storage_options=options)
    assert all(t["storage_options"] == options for t in tasks)
    task = next(t for t in tasks if t["start_pos"] > 4096 and t["end_pos"] is not None
                and t["end_pos"] + 4096 < t["segment_size"])
    storage.clear_cache()
    got = [r for b in ks.read_task(task) for r in b.column("offset").to_pylist()]
    assert got and task["start_offset"] <= got[0] and got[-1] < task["end_offset"]
    path = file_path(task["dir"], task["segment"], LOG_SUFFIX)
    buf = storage.range_buffer(path, task["segment_size"])
    lo = task["start_pos"] // 1024 * 1024
    hi = -(-task["end_pos"] // 1024) * 1024
    assert 0 < buf.fetched <= hi - lo < task["segment_size"]


def test_segment_deleted_between_planning_and_reading(s3, s3_kafkalog_dir, tmp_path):
    local, _ = s3_kafkalog_dir
    copy = tmp_path / "events-0"
    shutil.copytree(os.path.join(local, "events-0"), copy)
    prefix = "spark-faults/deleted/events-0"
    url = s3.upload(copy, prefix)
    tasks = ks.plan([url], {}, storage_options=s3.options)
    first = tasks[0]
    s3.client.delete_object(Bucket=s3.bucket, Key=file_path(prefix, first["segment"], LOG_SUFFIX))
    storage.clear_cache()
    with pytest.raises(OffsetOutOfRangeError, match="deleted after planning"):
        list(ks.read_task(first))
    assert list(ks.read_task(dict(first, fail_on_data_loss=False))) == []


# -------------------------------------------------------------------------------- read_arrow
def test_read_arrow_matches_the_local_read(s3, s3_kafkalog_dir, monkeypatch):
    local, url = s3_kafkalog_dir
    for extra in ({}, COMMITTED, {"starting_offsets": {"events": {"0": 50, "1": 0}},
                                  "ending_offsets": {"events": {"0": 400, "1": 7}}}):
        expected = kafkalog.read_arrow(local, **extra)
        assert kafkalog.read_arrow(url, storage_options=s3.options, **extra).equals(expected)
        storage.reset()
        assert kafkalog.read_arrow(url.replace("s3://", "s3a://"),
                                   storage_options=s3.options, **extra).equals(expected)
    storage.reset()
    s3.use_environment(monkeypatch)
    assert kafkalog.read_arrow(url, **COMMITTED).equals(kafkalog.read_arrow(local, **COMMITTED))


def test_streaming_plans_a_bucket_with_storage_options(s3, s3_kafkalog_dir):
    """``spark.readStream.format("kafkalog")``'s planning (``KafkaLogStream``, no Spark needed)
    reads the ``storageOptions`` option like a batch read."""
    from kafkalog.spark.streaming import KafkaLogStream, read_stream_task
    local, url = s3_kafkalog_dir
    options = {"storageOptions": _options_json(s3), "startingOffsets": "earliest",
               "maxOffsetsPerTrigger": "500"}
    stream = KafkaLogStream([url], options)
    start = stream.initial_offset()
    end = stream.latest_offset(start, max_rows=500)
    tasks = stream.plan(start, end)
    assert tasks and all(t["storage_options"]["secret"] == SECRET for t in tasks)
    storage.reset()
    got = sorted(pair for t in tasks for batch in read_stream_task(t)
                 for pair in zip(batch.column("partition").to_pylist(),
                                 batch.column("offset").to_pylist()))
    assert 0 < len(got) <= 500       # 500 offsets, less the transaction markers'
    expected = kafkalog.read_arrow(local, ending_offsets={
        "events": {str(p): int(end["events"][str(p)]) for p in (0, 1)}})
    assert got == sorted(zip(expected.column("partition").to_pylist(),
                             expected.column("offset").to_pylist()))
