#!/usr/bin/env bash
# Sets everything up, then runs the whole suite twice: with the compiled kernels, and with the
# pure-Python reference kernels (KAFKALOG_NO_EXTENSIONS=1).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
echo "== ruff: undefined names, unused imports and variables"
.venv/bin/ruff check --quiet --select F,E9 kafkalog tests bench scripts asv_benchmarks examples
echo "== mypy: the public API's annotations"
.venv/bin/mypy kafkalog
echo "== compiled kernels"
.venv/bin/python -m pytest -q "$@"
echo "== pure-Python kernels (KAFKALOG_NO_EXTENSIONS=1)"
KAFKALOG_NO_EXTENSIONS=1 .venv/bin/python -m pytest -q "$@"
echo "== asv benchmark suite (discovery and setup checks)"
.venv/bin/asv machine --yes > /dev/null
.venv/bin/asv check --python=same
echo "== the wheel: built, installed in a fresh venv, tested from outside the source tree"
bash scripts/wheel_check.sh
echo "== the README's Spark cluster example (local-cluster executors, packed environment)"
bash scripts/spark_cluster_check.sh
