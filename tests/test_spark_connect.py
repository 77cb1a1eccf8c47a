"""Spark Connect and registration, in one fresh process started outside the checkout (a
temporary directory, no PYTHONPATH): ``spark.read.format("kafkalog")`` is found by PySpark
through the installed ``pyspark_kafkalog`` with no register call, and reads, filters, picks
columns and streams (``Trigger.AvailableNow``) through ``SparkSession.builder.remote``, and
``kafkalog.spark.read``'s query is planned once (``KAFKALOG_COUNT_PLANS``), its workers reading
that plan.

One subprocess: a local Connect server starts a Spark driver of its own, which the classic
session of the other tests' process would collide with."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("grpc", reason="Spark Connect needs the connect extra (grpcio)")

from test_spark_options import write_topic  # noqa: E402

SCRIPT = textwrap.dedent("""
    import json, sys
    from pyspark.sql import SparkSession
    path, checkpoint = sys.argv[1], sys.argv[2]
    spark = (SparkSession.builder.remote("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    out = {}
    # no register call: the server's PySpark finds pyspark_kafkalog among installed modules
    df = spark.read.format("kafkalog").load(path)
    out["count"] = df.count()
    out["filtered"] = df.filter("offset >= 5").count()
    out["count_again"] = df.count()
    out["columns"] = [tuple(r) for r in spark.read.format("kafkalog")
                      .schema("offset LONG, partition INT").load(path)
                      .orderBy("offset").limit(3).collect()]
    stream = (spark.readStream.format("kafkalog").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "4").load(path)
              .writeStream.format("memory").queryName("kafkalog_stream")
              .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    stream.awaitTermination(120)
    out["streamed"] = sorted(r.offset for r in spark.sql("SELECT offset FROM kafkalog_stream")
                             .collect())
    import os, kafkalog, kafkalog.spark as ks
    out["kafkalog"] = kafkalog.__file__
    plans = os.environ["KAFKALOG_COUNT_PLANS"]     # every plan the server's workers make
    open(plans, "w").close()
    out["read"] = ks.read(spark, path).filter("offset < 3").count()
    out["plans"] = sorted(line.split()[1] for line in open(plans))
    print("RESULT " + json.dumps(out))
    spark.stop()
""")


@pytest.mark.allow_slow("a Spark Connect server and its driver in a fresh process (~28 s)")
def test_connect_session_from_a_fresh_process_outside_the_checkout(tmp_path):
    root = write_topic(tmp_path / "logs", "t", records=12)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               KAFKALOG_COUNT_PLANS=str(tmp_path / "plans"))
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(root / "t-0"),
                          str(tmp_path / "checkpoint")],
                         cwd=work, env=env, capture_output=True, text=True, timeout=600)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    assert lines, ("no result: is kafkalog installed where PySpark looks for pyspark_* modules "
                   "(scripts/setup.sh installs the wheel it builds into .venv)?\n"
                   + out.stderr[-4000:])
    got = json.loads(lines[-1][len("RESULT "):])
    assert not got["kafkalog"].startswith(str(work)), got["kafkalog"]
    assert (got["count"], got["filtered"], got["count_again"]) == (12, 7, 12)
    assert got["columns"] == [[0, 0], [1, 0], [2, 0]]
    assert got["streamed"] == list(range(12))
    assert got["read"] == 3
    assert got["plans"] == ["query"]      # one plan, made by the server; no worker planned
