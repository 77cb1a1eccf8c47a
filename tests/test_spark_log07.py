"""The Spark data source over Kafka 0.7 partition directories (``.kafka`` files): the Kafka
source's schema, offset = byte offset, value = payload, key and timestamp null, topic and
partition from ``my_topic_0``; the session of ``test_spark.py``."""
import pytest

from kafkalog.files import log07_file_name

import test_spark
from test_log07 import entry, gzip_wrapper, write_dir

spark = test_spark.spark          # the one session-scoped SparkSession of the suite

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def test_spark_reads_a_0_7_partition(spark, tmp_path):
    a = entry(b"a", magic=0)
    write_dir(tmp_path, {log07_file_name(0): a + gzip_wrapper(b"g1", b"g2")}, name="my_topic_0")
    df = spark.read.format("kafkalog").load(str(tmp_path))
    assert [f.name for f in df.schema.fields] == ["key", "value", "topic", "partition", "offset",
                                                  "timestamp", "timestampType"]
    got = sorted(tuple(r) for r in df.collect())          # one action: the session is shared
    assert got == [(None, b"a", "my_topic", 0, 0, None, -1),
                   (None, b"g1", "my_topic", 0, len(a), None, -1),
                   (None, b"g2", "my_topic", 0, len(a), None, -1)]
