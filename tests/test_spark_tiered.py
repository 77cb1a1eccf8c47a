"""The Spark reader on Kafka tiered storage (Aiven's RemoteStorageManager objects, see
``test_tiered.py``): a tiered prefix alone and together with the broker's own partition
directory (every offset once: tiered segments below the broker's log start, the broker's
above), through ``kafkalog.spark.read`` (keys travel to executors as PEM text) and
``spark.read.format("kafkalog")`` with the ``rsmKeys`` option, from a local directory and from
the moto S3 bucket."""
import json

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("cryptography")

import kafkalog.spark as ks  # noqa: E402
from kafkalog import storage  # noqa: E402

import test_spark  # noqa: E402
from test_spark import rows  # noqa: E402
from test_tiered import KEYS, TOPIC_DIRS, _broker_dir_above, objects, source  # noqa: E402

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


@pytest.fixture(autouse=True)
def _fresh_storage():
    storage.reset()
    yield
    storage.reset()


def test_local_and_tiered_together_are_the_whole_partition(spark, tmp_path):
    broker = _broker_dir_above(tmp_path, 528)
    whole = rows(ks.read(spark, [source("txn")]))
    both = ks.read(spark, [broker, objects("c-zstd-aes-64kib")], subscribe="txn",
                   rsmKeys=json.dumps(KEYS))
    assert rows(both) == whole
    committed = {"kafka.isolation.level": "read_committed"}
    assert rows(ks.read(spark, [broker, objects("d-aes-4kib-txn-only")], subscribe="txn",
                        rsmKeys=KEYS, **committed)) == \
        rows(ks.read(spark, [source("txn")], **committed))


def test_the_data_source_reads_a_tiered_prefix_with_rsm_keys(spark):
    df = (spark.read.format("kafkalog").option("rsmKeys", json.dumps(KEYS))
          .load(objects("c-zstd-aes-64kib")))
    got = rows(df)
    assert len(got) == 28000 + 572
    assert [r for r in got if r[0] == "txn"] == \
        rows(ks.read(spark, [source("txn")], endingOffsets=json.dumps({"txn": {"0": 594}})))


def test_a_tiered_prefix_in_a_bucket(spark, s3, tmp_path):
    import os
    url = s3.upload(os.path.join(objects("b-zstd-64kib")), "tiered-aiven/spark-b")
    df = ks.read(spark, [f"{url}/{TOPIC_DIRS['multiseg']}"], rsmKeys=KEYS,
                 storageOptions=json.dumps(s3.options))
    assert df.count() == 28000
    assert rows(df) == rows(ks.read(spark, [source("multiseg")],
                                    endingOffsets=json.dumps({"multiseg": {"0": 28000}})))


def test_keys_reach_only_the_reads_they_were_given_to(spark):
    from kafkalog.errors import TieredKeyError
    objects_d = objects("d-aes-4kib-txn-only")
    assert ks.plan([objects_d], {"rsmKeys": KEYS})     # planned: its indexes decrypted
    # the same session and processes, later reads without keys or with another key id
    with pytest.raises(TieredKeyError, match="no keys were given"):
        ks.read(spark, [objects_d])
    with pytest.raises(Exception, match="key1"):
        spark.read.format("kafkalog").option("rsmKeys", json.dumps({"key2": KEYS["key1"]})) \
            .load(objects_d).count()



def test_a_stream_of_an_encrypted_tiered_prefix(spark, tmp_path):
    """Structured Streaming over encrypted tiered segments: the keys reach every micro-batch's
    executors, and the micro-batches together are the batch read's rows, each once."""
    from test_spark_streaming import read_stream, run_now
    prefix = objects("d-aes-4kib-txn-only")
    df = read_stream(spark, prefix, rsmKeys=json.dumps(KEYS), startingOffsets="earliest",
                     maxOffsetsPerTrigger=300)
    query, got = run_now(df, tmp_path / "checkpoint", rows)
    assert len(query.recentProgress) >= 2            # 300 offsets a trigger
    assert got == sorted(rows(spark.read.format("kafkalog").option("rsmKeys", json.dumps(KEYS))
                              .load(prefix)))
