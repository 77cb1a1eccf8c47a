#!/usr/bin/env bash
# Checks the sdist and the wheel scripts/setup.sh built (dist/), installs the wheel into a fresh
# venv and runs the smoke test and the core test modules against it from outside the source
# tree, with the compiled kernels required (KAFKALOG_EXPECT_INSTALLED=1 makes conftest check
# both).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
wheel=$(ls dist/kafkalog-*.whl 2> /dev/null) && sdist=$(ls dist/kafkalog-*.tar.gz 2> /dev/null) \
  || { echo "no wheel and sdist in dist/: run scripts/setup.sh first"; exit 1; }
.venv/bin/python - "$wheel" "$sdist" <<'PY'
import sys, tarfile, zipfile
wheel = zipfile.ZipFile(sys.argv[1]).namelist()
sdist = tarfile.open(sys.argv[2]).getnames()
assert any(n.startswith("kafkalog/_core.") and n.endswith(".so") for n in wheel), wheel
assert not any(n.endswith((".pyx", ".pxi", ".pxd", ".c")) for n in wheel), "sources in the wheel"
assert "kafkalog/py.typed" in wheel and "kafkalog/_core.pyi" in wheel
# PySpark finds the kafkalog data source through this top-level module
assert "pyspark_kafkalog/__init__.py" in wheel, "pyspark_kafkalog is not in the wheel"
assert any(n.endswith("kafkalog/_core.pyx") for n in sdist) and \
    any(n.endswith("kafkalog/_core.pxd") for n in sdist) and \
    any(n.endswith("kafkalog/_record.pxi") for n in sdist), "the sdist lacks the Cython sources"
print(f"wheel: {len(wheel)} files, compiled module and pyspark_kafkalog, no sources; sdist "
      f"carries the .pyx/.pxd")
PY
# `wheel_check.sh prepare` only makes .venv-wheel (scripts/test.sh runs it in the background while
# pytest runs); a later run with WHEEL_ENV_READY=1 uses that venv instead of making it again.
if [ "${WHEEL_ENV_READY:-}" != 1 ] || [ "${1:-}" = prepare ]; then
  rm -rf .venv-wheel
  python3 -m venv .venv-wheel
  .venv-wheel/bin/python -m pip install -q --upgrade pip
  .venv-wheel/bin/python -m pip install -q "$wheel" pytest hypothesis kafka-python aiokafka lz4 \
    zstandard python-snappy
fi
if [ "${1:-}" = prepare ]; then exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$root/.venv-wheel/bin/python" "$root/tests/smoke.py"
KAFKALOG_EXPECT_INSTALLED=1 "$root/.venv-wheel/bin/python" -m pytest -q -p no:cacheprovider \
  --rootdir "$root" -c "$root/pyproject.toml" \
  "$root/tests/test_kernels.py" "$root/tests/test_records.py" "$root/tests/test_index.py" \
  "$root/tests/test_segment.py" "$root/tests/test_log.py" "$root/tests/test_errors.py"
