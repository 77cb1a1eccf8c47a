#!/usr/bin/env bash
# Follows the README's "On a cluster" section literally: build the wheel, pack an environment
# with venv-pack, and run a Spark application whose executors (separate processes of a
# local-cluster master) use the packed environment from --archives. Checks the records read
# and that the executors' Python and kafkalog came from the archive.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d)
# local-cluster workers unpack the archive under pyspark's own work/ directory: remove it after
spark_work=$("$root/.venv/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "work"))')
trap 'rm -rf "$work" "$spark_work"' EXIT
.venv/bin/python -m pip wheel -q --no-deps --no-build-isolation -w "$work/dist" .
cd "$work"
python3 -m venv pack-env
pack-env/bin/pip install -q dist/kafkalog-*.whl pyarrow "pandas<3" venv-pack
pack-env/bin/venv-pack -q -p pack-env -o kafkalog-env.tar.gz
export PYSPARK_DRIVER_PYTHON="$root/.venv/bin/python"
PYSPARK_PYTHON=./environment/bin/python "$root/.venv/bin/spark-submit" \
  --master "local-cluster[2,1,1024]" --conf spark.ui.enabled=false \
  --archives kafkalog-env.tar.gz#environment \
  "$root/examples/spark_cluster_app.py" "$root/../shared/fixtures/kafka-written/multiseg-0" \
  2> spark.log | tail -1 > result.json || { tail -30 spark.log; exit 1; }
"$root/.venv/bin/python" - result.json <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
assert result["count"] == 30000, result
for e in result["executors"]:
    assert "environment" in e["python"] and "environment" in e["kafkalog"], e
    assert e["compiled"], e
print(f"cluster example: {result['count']} records; executors ran "
      f"{sorted({e['python'] for e in result['executors']})} with kafkalog from the archive")
PY
