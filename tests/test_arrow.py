"""kafkalog.arrow: Kafka data at rest as Arrow tables, pandas DataFrames and streaming
RecordBatchReaders, outside Spark. Checked against Kafka's own reading of the fixtures and
against the Spark reader's planned tasks (the same records, schema and options), on logs
written by Kafka and by kafkalog; then the streaming, the errors, and pandas, polars and
DuckDB reading the output."""
import datetime
import gc
import json
import shutil
import sys

import pytest

pa = pytest.importorskip("pyarrow")

import kafkalog  # noqa: E402
import kafkalog.arrow as ka  # noqa: E402
import kafkalog.spark as ks  # noqa: E402
from kafkalog.errors import (  # noqa: E402
    InvalidConfigError, KafkaLogError, LogNotFoundError, OffsetOutOfRangeError,
)
from kafkalog.log import Log  # noqa: E402
from kafkalog.scan import reader as scan_reader  # noqa: E402
from kafkalog.spark.options import Options  # noqa: E402

from conftest import (  # noqa: E402
    FIXTURES, fixture_names, reference, txn0_committed,
)

T0 = 1_700_000_000_000
UTC = datetime.timezone.utc


# ------------------------------------------------------------------------------- helpers
def rows(table, headers=False):
    """(topic, partition, offset, timestamp ms, timestampType, key, value[, headers]) per row,
    in the table's order."""
    d = table.to_pydict()
    millis = [None if v is None else v // 1000
              for v in table.column("timestamp").cast(pa.int64()).to_pylist()]
    out = []
    for i in range(table.num_rows):
        item = (d["topic"][i], d["partition"][i], d["offset"][i], millis[i],
                d["timestampType"][i], d["key"][i], d["value"][i])
        if headers:
            h = d["headers"][i]
            item += (None if h is None else tuple((x["key"], x["value"]) for x in h),)
        out.append(item)
    return out


def spark_tasks_table(paths, options):
    """What the Spark reader's executors return for ``paths``: every planned task read."""
    tasks = ks.plan(paths, options)
    batches = [b for t in tasks for b in ks.read_task(t)]
    return pa.Table.from_batches(batches, ks.arrow_schema(Options(options).include_headers))


def stamp(i):
    return T0 + 10 * i


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    """A log dir written by kafkalog: topic ``orders`` (2 partitions), ``payments`` (1) and
    ``audit`` (1), 300 records each in batches of 1 to 5, several segments each, headers on
    every third record, a null key on every seventh."""
    root = tmp_path_factory.mktemp("arrow") / "logs"
    for topic, partitions in (("orders", 2), ("payments", 1), ("audit", 1)):
        for p in range(partitions):
            log = Log.open(root / f"{topic}-{p}", {"segment.bytes": 4096,
                                                   "index.interval.bytes": 128})
            try:
                o = 0
                while o < 300:
                    n = min(1 + o % 5, 300 - o)
                    log.append([kafkalog.Record(
                        key=None if i % 7 == 0 else b"k%d" % i,
                        value=b"%s-%d-%d" % (topic.encode(), p, i), timestamp=stamp(i),
                        headers=(("h", b"%d" % i), ("n", None)) if i % 3 == 0 else ())
                        for i in range(o, o + n)])
                    o += n
            finally:
                log.close()
    return root


def written_rows(topic, partition, lo=0, hi=300, headers=False):
    out = []
    for i in range(lo, hi):
        item = (topic, partition, i, stamp(i), 0, None if i % 7 == 0 else b"k%d" % i,
                b"%s-%d-%d" % (topic.encode(), partition, i))
        if headers:
            item += ((("h", b"%d" % i), ("n", None)) if i % 3 == 0 else None,)
        out.append(item)
    return out


# ------------------------------------------------------------------ against Kafka and Spark
READABLE = [n for n in fixture_names() if n != "corrupt_flip-0"]


@pytest.mark.parametrize("name", READABLE)
def test_every_fixture_as_kafka_reads_it(name):
    table = kafkalog.read_arrow(FIXTURES / name, includeHeaders=True)
    assert table.schema == ks.arrow_schema(True)
    assert rows(table, headers=True) == reference(name, headers=True)


@pytest.mark.parametrize("options", [
    {"includeHeaders": "true"},
    {},
    {"kafka.isolation.level": "read_committed", "includeHeaders": True},
    {"startingOffsets": '{"txn": {"0": 100}}', "endingOffsets": '{"txn": {"0": 400}}'},
    {"startingTimestamp": str(T0 + 500), "maxBytesPerTask": "3000"},
])
def test_equals_what_the_spark_readers_tasks_return(options):
    path = str(FIXTURES / "txn-0")
    want = spark_tasks_table([path], options)
    got = kafkalog.read_arrow(path, **options)
    assert got.schema == want.schema
    assert got.equals(want)
    assert got.num_rows > 0


def test_equals_the_spark_reader_on_a_log_dir_written_by_kafkalog(log_dir):
    for options in ({}, {"includeHeaders": "true", "subscribe": "orders,audit"},
                    {"startingOffsetsByTimestamp": json.dumps(
                        {"orders": {"0": stamp(50), "1": stamp(250)}}),
                     "subscribe": "orders"}):
        want = spark_tasks_table([str(log_dir)], options)
        assert kafkalog.read_arrow(log_dir, **options).equals(want)


def test_read_committed_on_the_transactional_fixture():
    committed = txn0_committed()
    want = reference("txn-0", keep=committed)
    path = FIXTURES / "txn-0"
    assert rows(kafkalog.read_arrow(path, **{"kafka.isolation.level": "read_committed"})) == want
    assert rows(kafkalog.read_arrow(path, isolation_level="READ_COMMITTED")) == want
    assert rows(kafkalog.read_arrow(path)) == reference("txn-0")
    assert len(want) < len(reference("txn-0"))


@pytest.mark.parametrize("start,end", [(0, 10), (95, 4410), (4321, 4322), (6000, None),
                                       (None, 3000)])
def test_offset_ranges(start, end):
    lo, hi = start or 0, end if end is not None else 10 ** 12
    want = reference("gzip-0", keep=lambda r, b: lo <= r["offset"] < hi)
    starting = "earliest" if start is None else json.dumps({"gzip": {"0": start}})
    ending = "latest" if end is None else json.dumps({"gzip": {"0": end}})
    path = FIXTURES / "gzip-0"
    assert rows(kafkalog.read_arrow(path, startingOffsets=starting, endingOffsets=ending)) == want
    # the Pythonic spelling: snake_case names, dicts with int partitions
    assert rows(kafkalog.read_arrow(
        path, starting_offsets="earliest" if start is None else {"gzip": {0: start}},
        ending_offsets="latest" if end is None else {"gzip": {0: end}})) == want


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.77])
def test_timestamp_ranges(fraction):
    name = "multiseg-0"
    recs = reference(name)
    lo_ts = recs[int(len(recs) * fraction)][3]
    hi_ts = lo_ts + 2000
    start = next(r[2] for r in recs if r[3] >= lo_ts)
    end = next((r[2] for r in recs if r[3] >= hi_ts), None)
    want = [r for r in recs if r[2] >= start and (end is None or r[2] < end)]
    path = FIXTURES / name
    assert rows(kafkalog.read_arrow(path, startingTimestamp=str(lo_ts),
                                    endingTimestamp=str(hi_ts))) == want
    as_datetimes = {"starting_timestamp": datetime.datetime.fromtimestamp(lo_ts / 1000, UTC),
                    "ending_timestamp": datetime.datetime.fromtimestamp(hi_ts / 1000, UTC)}
    assert rows(kafkalog.read_arrow(path, **as_datetimes)) == want
    by_ts = {"multiseg": {"0": lo_ts}}
    assert rows(kafkalog.read_arrow(path, starting_offsets_by_timestamp=by_ts)) == \
        [r for r in recs if r[2] >= start]


def test_a_whole_log_dir_with_several_topics(log_dir):
    everything = [r for topic, parts in (("audit", 1), ("orders", 2), ("payments", 1))
                  for p in range(parts) for r in written_rows(topic, p, headers=True)]
    table = kafkalog.read_arrow(log_dir, include_headers=True)
    assert rows(table, headers=True) == everything         # topic, partition, offset order
    # the parent of a log dir, and a list of partition dirs, read the same
    assert kafkalog.read_arrow(log_dir.parent, include_headers=True).equals(table)
    listed = kafkalog.read_arrow([log_dir / "payments-0", str(log_dir / "orders-1")])
    assert rows(listed) == written_rows("orders", 1) + written_rows("payments", 0)
    # topic selection as Spark's Kafka source selects
    orders = written_rows("orders", 0) + written_rows("orders", 1)
    assert rows(kafkalog.read_arrow(log_dir, subscribe="orders")) == orders
    assert rows(kafkalog.read_arrow(log_dir, subscribe=["orders"])) == orders
    assert rows(kafkalog.read_arrow(log_dir, subscribe_pattern="ord.*")) == orders
    assert rows(kafkalog.read_arrow(log_dir, assign={"orders": [1], "audit": [0]})) == \
        written_rows("audit", 0) + written_rows("orders", 1)
    ranged = kafkalog.read_arrow(log_dir, subscribe="orders,payments",
                                 starting_offsets={"orders": {"0": 10, "1": -2},
                                                   "payments": {"0": 290}},
                                 ending_offsets={"orders": {"0": 20, "1": 5},
                                                 "payments": {"0": -1}})
    assert rows(ranged) == (written_rows("orders", 0, 10, 20) + written_rows("orders", 1, 0, 5)
                            + written_rows("payments", 0, 290, 300))


def test_an_empty_selection_is_an_empty_table_with_the_schema(log_dir):
    for options in ({"subscribe": "nosuchtopic"}, {"includeHeaders": True,
                                                   "subscribe": "orders",
                                                   "endingOffsets": {"orders": {0: 0, 1: 0}}}):
        table = kafkalog.read_arrow(log_dir, **options)
        assert table.num_rows == 0
        assert table.schema == ks.arrow_schema(bool(options.get("includeHeaders")))
        assert len(kafkalog.read_pandas(log_dir, **options)) == 0


def test_high_watermark_and_read_above_it(tmp_path):
    from kafkalog.checkpoint import write_offset_checkpoint
    root = tmp_path / "broker"
    shutil.copytree(FIXTURES / "plain-0", root / "plain-0")
    write_offset_checkpoint(root / "replication-offset-checkpoint", {("plain", 0): 2990})
    assert kafkalog.read_arrow(root).num_rows == 2990
    assert kafkalog.read_arrow(root, read_above_high_watermark=True).num_rows == 3000


def test_corrupt_data_and_fail_on_data_loss():
    path = FIXTURES / "corrupt_flip-0"
    reader = kafkalog.record_batch_reader(path)      # planning reads no batch
    with pytest.raises(KafkaLogError) as e:
        reader.read_all()
    assert "CRC" in str(e.value) or "corrupt" in str(e.value).lower()
    lenient = kafkalog.read_arrow(path, fail_on_data_loss=False)
    assert rows(lenient) == reference("corrupt_flip-0", keep=lambda r, b: r["offset"] < 1890)
    assert rows(kafkalog.read_arrow(path, validate_crc="false")) == reference("corrupt_flip-0")


# ---------------------------------------------------------------------------- streaming
def test_the_reader_streams_batch_by_batch(log_dir):
    path = FIXTURES / "multiseg-0"
    n_tasks = len(ks.plan([str(path)], {"maxBytesPerTask": 20000}))
    assert n_tasks > 30
    reader = kafkalog.record_batch_reader(path, max_bytes_per_task=20000)
    assert isinstance(reader, pa.RecordBatchReader)
    assert reader.schema == ks.arrow_schema(False)
    sizes, offsets = [], []
    for batch in reader:
        sizes.append(batch.num_rows)
        offsets.extend(batch.column("offset").to_pylist())
    assert len(sizes) >= n_tasks and max(sizes) < 30000
    assert offsets == list(range(30000))
    # a kafkalog-written multi-segment log: one batch per segment at least
    segments = len(list((log_dir / "audit-0").glob("*.log")))
    assert segments > 3
    batches = list(kafkalog.record_batch_reader(log_dir / "audit-0"))
    assert len(batches) >= segments


def test_a_consumer_can_stop_early(monkeypatch):
    started, finished = [], []
    real = scan_reader.read_task

    def counting(task, columns=None, rsm_keys=None):
        started.append((task["segment"], task["start_pos"]))
        try:
            yield from real(task, columns, rsm_keys)
        finally:
            finished.append(task["segment"])     # the task's mmap is let go

    monkeypatch.setattr(scan_reader, "read_task", counting)
    path = FIXTURES / "multiseg-0"
    with kafkalog.record_batch_reader(path, maxBytesPerTask=20000) as reader:
        assert started == []                          # planned, nothing read yet
        first = reader.read_next_batch()
        second = reader.read_next_batch()
    assert first.column("offset")[0].as_py() == 0
    assert second.column("offset")[0].as_py() == first.column("offset")[-1].as_py() + 1
    assert 1 <= len(started) <= 2                      # of more than 30 tasks
    del reader
    gc.collect()
    assert len(finished) == len(started)              # a dropped reader stops reading


def test_a_segment_deleted_after_planning_is_data_loss(tmp_path, caplog):
    path = tmp_path / "multiseg-0"
    shutil.copytree(FIXTURES / "multiseg-0", path)
    first = sorted(path.glob("*.log"))[0]
    second_base = int(sorted(path.glob("*.log"))[1].name[:20])
    reader = kafkalog.record_batch_reader(path)
    lenient = kafkalog.record_batch_reader(path, failOnDataLoss="false")
    first.chmod(0o644)
    first.unlink()                                     # retention, between plan and read
    with pytest.raises(OffsetOutOfRangeError, match="deleted after planning"):
        reader.read_all()
    with caplog.at_level("WARNING", logger="kafkalog.arrow"):
        offsets = lenient.read_all().column("offset").to_pylist()
    assert offsets == list(range(second_base, 30000))
    assert "deleted after planning" in caplog.text


# ------------------------------------------------------------------------------- errors
def test_option_errors_are_raised_when_the_call_is_made(log_dir):
    with pytest.raises(InvalidConfigError, match=r"startingOfsets \(did you mean "
                                                 r"startingOffsets\?\)"):
        kafkalog.record_batch_reader(log_dir, startingOfsets="earliest")
    # a snake_case typo is answered in snake_case
    with pytest.raises(InvalidConfigError, match=r"^unknown option\(s\) starting_offset "
                                                 r"\(did you mean starting_offsets\?\)$"):
        kafkalog.read_arrow(log_dir, starting_offset="earliest")
    with pytest.raises(InvalidConfigError, match="can't be latest"):
        kafkalog.read_arrow(log_dir, startingOffsets="latest")
    with pytest.raises(InvalidConfigError, match="Only one of"):
        kafkalog.read_arrow(log_dir, subscribe="orders", assign={"orders": [0]})
    with pytest.raises(InvalidConfigError, match="given twice"):
        kafkalog.read_arrow(log_dir, startingOffsets="earliest", starting_offsets="earliest")
    with pytest.raises(InvalidConfigError, match="time zone"):
        kafkalog.read_arrow(log_dir, starting_timestamp=datetime.datetime(2024, 1, 1))
    with pytest.raises(InvalidConfigError, match="first argument"):
        kafkalog.read_arrow(log_dir, path=str(log_dir))
    with pytest.raises(ValueError):                 # InvalidConfigError is a ValueError
        kafkalog.read_pandas(log_dir, isolation_level="serializable")
    with pytest.raises(OffsetOutOfRangeError):
        kafkalog.read_arrow(log_dir, subscribe="payments",
                            starting_offsets={"payments": {"0": -5}})


def test_a_missing_path_is_a_typed_error(tmp_path):
    with pytest.raises(LogNotFoundError) as e:
        kafkalog.read_arrow(tmp_path / "nowhere")
    assert isinstance(e.value, FileNotFoundError)
    assert "nowhere" in str(e.value)


def test_url_paths_and_storage_options(log_dir):
    url = (log_dir / "payments-0").as_uri()             # file:///...: a local path
    table = kafkalog.read_arrow(url, storage_options={})
    assert rows(table) == written_rows("payments", 0)
    assert rows(kafkalog.read_arrow(log_dir.as_uri(), subscribe="payments")) == \
        written_rows("payments", 0)
    # the storage_options keyword and the storageOptions option are one setting
    with pytest.raises(InvalidConfigError, match="not both"):
        kafkalog.read_arrow(url, storage_options={}, storageOptions={"anon": True})
    with pytest.raises(InvalidConfigError, match="JSON object") as e:
        kafkalog.read_arrow(url, storageOptions='["secret-value"]')
    assert "secret-value" not in str(e.value)          # credentials stay out of messages
    # local paths read the same with storage_options given
    assert rows(kafkalog.read_arrow(log_dir / "payments-0", storage_options=None)) == \
        written_rows("payments", 0)


def test_without_pyarrow_or_pandas_a_typed_import_error(monkeypatch, log_dir):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ka.MissingArrowExtraError) as e:
        kafkalog.read_pandas(log_dir)
    assert isinstance(e.value, ImportError) and isinstance(e.value, KafkaLogError)
    assert e.value.missing == ("pandas",) and "kafkalog[arrow]" in str(e.value)
    assert kafkalog.read_arrow(log_dir).num_rows == 1200     # needs pyarrow only
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    for call in (kafkalog.read_arrow, kafkalog.record_batch_reader):
        with pytest.raises(ka.MissingArrowExtraError, match="pyarrow"):
            call(log_dir)


def test_the_package_exports():
    assert kafkalog.read_arrow is ka.read_arrow
    assert kafkalog.read_pandas is ka.read_pandas
    assert kafkalog.record_batch_reader is ka.record_batch_reader
    assert kafkalog.arrow is ka
    assert {"read_arrow", "read_pandas", "record_batch_reader"} <= set(kafkalog.__all__)
    assert ka.schema(True) == ks.arrow_schema(True)
    with pytest.raises(AttributeError):
        kafkalog.no_such_name  # noqa: B018


# ------------------------------------------------------------------- pandas, polars, DuckDB
def test_pandas_dtypes_and_values(log_dir):
    pd = pytest.importorskip("pandas")
    df = kafkalog.read_pandas(log_dir, subscribe="payments", include_headers=True)
    assert len(df) == 300
    assert str(df["timestamp"].dtype) == "datetime64[us, UTC]"
    assert df["partition"].dtype == "int32" and df["timestampType"].dtype == "int32"
    assert df["offset"].dtype == "int64"
    assert df["key"].dtype == object and df["value"].dtype == object
    assert df["key"][0] is None and df["key"][1] == b"k1" and type(df["value"][1]) is bytes
    assert df["topic"].unique().tolist() == ["payments"]
    assert df["timestamp"][5] == pd.Timestamp(stamp(5), unit="ms", tz="UTC")
    assert [dict(h) for h in df["headers"][3]] == [{"key": "h", "value": b"3"},
                                                    {"key": "n", "value": None}]
    assert df["headers"][1] is None


def test_polars_reads_the_table_and_the_stream(log_dir):
    pl = pytest.importorskip("polars")
    frame = pl.from_arrow(kafkalog.read_arrow(log_dir))
    assert frame.schema["key"] == pl.Binary and frame.schema["partition"] == pl.Int32
    assert frame.schema["timestamp"] == pl.Datetime("us", "UTC")
    counts = dict(frame.group_by("topic").len().iter_rows())
    assert counts == {"orders": 600, "payments": 300, "audit": 300}
    streamed = pl.from_arrow(kafkalog.record_batch_reader(log_dir, subscribe="audit"))
    assert streamed["offset"].to_list() == list(range(300))


def test_a_timestamp_no_record_reaches_names_the_strategy(tmp_path):
    """A log dir where one partition has no timestamps (magic v0): the README's DuckDB example
    is refused naming the option that makes it work, and works with it."""
    duckdb = pytest.importorskip("duckdb")
    shutil.copytree(FIXTURES / "legacy_v0-0", tmp_path / "legacy_v0-0")
    shutil.copytree(FIXTURES / "plain-0", tmp_path / "plain-0")
    with pytest.raises(InvalidConfigError, match="legacy_v0-0.*startingOffsetsByTimestampStrategy"
                                                 "=latest"):
        kafkalog.record_batch_reader(tmp_path, startingTimestamp=str(T0))
    reader = kafkalog.record_batch_reader(tmp_path, startingTimestamp=str(T0),  # noqa: F841
                                          starting_offsets_by_timestamp_strategy="latest")
    assert duckdb.sql("SELECT topic, count(*) FROM reader GROUP BY topic").fetchall() == \
        [("plain", len(reference("plain-0")))]


def test_duckdb_queries_the_stream(log_dir):
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    reader = kafkalog.record_batch_reader(log_dir, subscribe="orders")
    con.register("orders", reader)
    got = con.execute("SELECT partition, count(*), max(\"offset\"), "
                      "count(*) FILTER (WHERE key IS NULL) FROM orders "
                      "GROUP BY partition ORDER BY partition").fetchall()
    nulls = len([i for i in range(300) if i % 7 == 0])
    assert got == [(0, 300, 299, nulls), (1, 300, 299, nulls)]
    con.register("payments", kafkalog.read_arrow(log_dir, subscribe="payments"))
    first = con.execute("SELECT epoch_ms(timestamp), decode(value) FROM payments "
                        "ORDER BY \"offset\" LIMIT 1").fetchone()
    assert first == (stamp(0), "payments-0-0")
