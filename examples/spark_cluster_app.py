"""The README's "On a cluster" example: read Kafka data with kafkalog on executors that get
kafkalog from a packed environment (``--archives kafkalog-env.tar.gz#environment``).

Usage: spark-submit --archives kafkalog-env.tar.gz#environment examples/spark_cluster_app.py PATH...
Prints, for each PATH, one JSON line: the record count, the value bytes and where the executors'
Python and kafkalog came from.
"""
import json
import sys

from pyspark.sql import SparkSession

import kafkalog.spark as ks


def where(_):
    import kafkalog
    yield json.dumps({"python": sys.executable, "kafkalog": kafkalog.__file__,
                      "compiled": kafkalog.compiled()})


def main():
    spark = SparkSession.builder.appName("kafkalog-cluster-example").getOrCreate()
    for path in sys.argv[1:]:
        df = ks.read(spark, path, minPartitions=4)
        count = df.count()
        total = df.selectExpr("sum(length(value)) AS n").collect()[0].n
        executors = sorted(set(spark.sparkContext.parallelize(range(4), 4)
                               .mapPartitions(where).collect()))
        print(json.dumps({"path": path, "count": count, "value_bytes": total,
                          "executors": [json.loads(e) for e in executors]}))
    spark.stop()


if __name__ == "__main__":
    main()
