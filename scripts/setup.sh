#!/usr/bin/env bash
# Creates .venv (if missing), installs the build and test dependencies and builds kafkalog's
# Cython extension in place (editable install). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip "setuptools>=77" wheel
.venv/bin/python -m pip install -q "Cython>=3,<4" "numpy>=1.23"
# compat: the checkout goes on sys.path (a .pth file), where PySpark's scan for modules named
# pyspark_* (pkgutil.iter_modules) finds pyspark_kafkalog; the default editable mode's import
# hook is invisible to that scan, and spark.read.format("kafkalog") would not be found.
.venv/bin/python -m pip install -q --no-build-isolation -e ".[test,bench]" \
  --config-settings editable_mode=compat
.venv/bin/python -c "import kafkalog, sys; sys.exit(0 if kafkalog.compiled() else 'compiled kernels did not load')"
