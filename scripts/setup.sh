#!/usr/bin/env bash
# Creates .venv (if missing), installs the build and test dependencies, builds kafkalog's
# Cython extension in place (editable install) and, when javac is present, the JVM reader's
# jar (kafkalog/spark/kafkalog-spark.jar). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip "setuptools>=77" wheel
.venv/bin/python -m pip install -q "Cython>=3,<4" "numpy>=1.23"
.venv/bin/python -m pip install -q --no-build-isolation -e ".[test,bench]"
.venv/bin/python -c "import kafkalog, sys; sys.exit(0 if kafkalog.compiled() else 'compiled kernels did not load')"
if command -v javac > /dev/null; then
  echo "JVM reader: $(bash jvm/build.sh .venv/bin/python)"
else
  echo "JVM reader: not built (no javac); kafkalog.spark.read reads through Python workers"
fi
