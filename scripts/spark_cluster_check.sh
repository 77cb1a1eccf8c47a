#!/usr/bin/env bash
# Follows the README's "On a cluster" section literally: install the wheel (the one
# scripts/setup.sh built in dist/) into an environment, pack it with venv-pack, and run a Spark
# application whose executors (separate processes of a local-cluster master) use the packed
# environment from --archives. Checks the records read and that the executors' Python and
# kafkalog came from the archive. The same application also reads the data from a bucket
# (README, "Reading from object storage"): a moto S3 server on 127.0.0.1 holds a copy of the
# data, the driver and executors get the standard AWS_* environment, and the executors read their
# byte ranges from the bucket; the result must equal the local path's. (One application reads
# both paths: a second one would start the cluster, its executors and their Python again.)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
# `spark_cluster_check.sh prepare DIR` only makes the packed environment in DIR (scripts/test.sh
# runs it in the background while pytest runs: pip and venv-pack mostly wait on I/O); a later run
# with CLUSTER_ENV=DIR uses it instead of making its own.
prepare() {  # prepare DIR: pack-env installed and packed, environment/ unpacked for the driver
  python3 -m venv "$1/pack-env"
  "$1/pack-env/bin/pip" install -q "$wheel[s3]" pyarrow "pandas<3" venv-pack
  "$1/pack-env/bin/venv-pack" -q -p "$1/pack-env" -o "$1/kafkalog-env.tar.gz"
  mkdir -p "$1/environment" && tar -xzf "$1/kafkalog-env.tar.gz" -C "$1/environment"
  touch "$1/ready"
}
wheel=$(ls "$root"/dist/kafkalog-*.whl 2> /dev/null) \
  || { echo "no wheel in dist/: run scripts/setup.sh first"; exit 1; }
if [ "${1:-}" = prepare ]; then prepare "$2"; exit 0; fi
work=$(mktemp -d)
# local-cluster workers unpack the archive under pyspark's own work/ directory: remove it after
spark_work=$("$root/.venv/bin/python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "work"))')
moto_pid=
cleanup() {
  if [ -n "$moto_pid" ]; then kill "$moto_pid" 2>/dev/null || true; wait "$moto_pid" 2>/dev/null || true; fi
  rm -rf "$work" "$spark_work"
}
trap cleanup EXIT
data="$root/../shared/fixtures/kafka-written/multiseg-0"
cd "$work"
# The data in a bucket of a local S3 endpoint (moto), started first: it comes up while pip runs
"$root/.venv/bin/python" "$root/scripts/moto_bucket.py" "$data" kafkalog-cluster/multiseg-0 \
  > moto.out 2> moto.log &
moto_pid=$!
if [ -n "${CLUSTER_ENV:-}" ] && [ -e "$CLUSTER_ENV/ready" ]; then
  mv "$CLUSTER_ENV/kafkalog-env.tar.gz" "$CLUSTER_ENV/environment" .
else
  prepare "$work"
fi
# the driver plans the data source's scans in Python workers of the same PYSPARK_PYTHON
export PYSPARK_DRIVER_PYTHON="$root/.venv/bin/python"

for _ in $(seq 300); do [ -s moto.out ] && break; kill -0 "$moto_pid" || break; sleep 0.1; done
[ -s moto.out ] || { echo "the moto S3 server did not start"; tail -30 moto.log; exit 1; }
read -r endpoint url < moto.out
# the AWS_* environment: the driver's from this shell, the executors' from spark.executorEnv
# (as the README says)
unset AWS_PROFILE AWS_SESSION_TOKEN AWS_ENDPOINT_URL_S3
export AWS_ENDPOINT_URL=$endpoint AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing \
  AWS_DEFAULT_REGION=us-east-1
env_conf=()
for var in AWS_ENDPOINT_URL AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_DEFAULT_REGION; do
  env_conf+=(--conf "spark.executorEnv.$var=${!var}")
done
# the README's command; one JSON line per path read
PYSPARK_PYTHON=./environment/bin/python "$root/.venv/bin/spark-submit" \
  --master "local-cluster[2,1,1024]" --conf spark.ui.enabled=false \
  --archives kafkalog-env.tar.gz#environment "${env_conf[@]}" \
  "$root/examples/spark_cluster_app.py" "$data" "${url/s3:/s3a:}/" \
  2> submit.log | tail -2 > results.json ||
  { grep -E -m 20 "ERROR|Error:|Exception:" submit.log; tail -30 submit.log; exit 1; }

"$root/.venv/bin/python" - results.json moto.log "$url" <<'PY'
import json, re, sys
local, bucket = (json.loads(line) for line in open(sys.argv[1]))
assert bucket["path"].startswith("s3a://"), (local, bucket)
for result in (local, bucket):
    assert result["count"] == 30000, result
    for e in result["executors"]:
        assert "environment" in e["python"] and "environment" in e["kafkalog"], e
        assert e["compiled"], e
assert (bucket["count"], bucket["value_bytes"]) == (local["count"], local["value_bytes"]), \
    (bucket, local)
# werkzeug's access log of the S3 server (colored): GETs of .log objects answered 206 (Partial
# Content) are ranged reads
key = sys.argv[3].split("://", 1)[1]
lines = (re.sub(r"\x1b\[[0-9;]*m", "", line) for line in open(sys.argv[2]))
ranged = [line for line in lines if re.search(rf'"GET /{re.escape(key)}/\d+\.log[ ?].*" 206 ', line)]
assert ranged, "no ranged GET of a .log object reached the S3 server"
print(f"cluster example: {local['count']} records ({local['value_bytes']} value bytes) from "
      f"the local path and the same from {sys.argv[3]} ({len(ranged)} ranged GETs of .log "
      f"objects); executors ran {sorted({e['python'] for e in local['executors']})} with "
      f"kafkalog from the archive")
PY
