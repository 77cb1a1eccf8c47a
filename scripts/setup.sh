#!/usr/bin/env bash
# Creates .venv (if missing) with the build, test and benchmark dependencies and builds kafkalog
# once: the sdist and, from it, the wheel (dist/; the one compile of the Cython extension).
# Installs that wheel in .venv (a regular install: PySpark's scan for pyspark_* modules finds
# pyspark_kafkalog in site-packages) and puts its compiled module beside the sources, so that
# code run from the checkout (the tests, the scripts, Spark's Python workers, which put their
# working directory first on sys.path) imports the checkout's kafkalog, compiled.
# scripts/wheel_check.sh and scripts/spark_cluster_check.sh install the same wheel. Safe to run
# again; run it again after changing a .pyx/.pxi/.pxd (code run elsewhere sees kafkalog as of
# the last run: the install is not editable).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
# kcat (Debian's package): a Kafka client of `kafkalog serve` that tests/test_serve.py runs;
# installed where this runs as root with apt (as CI does), else that test says how to get it.
# In the background: apt and pip below wait on different things.
kcat_pid=
if ! command -v kcat > /dev/null && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat) \
    > /tmp/kafkalog-kcat.log 2>&1 & kcat_pid=$!
fi
.venv/bin/python -m pip install -q --upgrade pip "setuptools>=77" wheel build
.venv/bin/python -m pip install -q "Cython>=3,<4" "numpy>=1.23"
rm -rf dist
# The test and bench extras' dependencies (pyproject.toml; kafkalog's own extras expanded) are
# installed while the extension compiles: pip waits on the disk and the network, the compiler
# on one core. numpy and Cython are already there, so the build's imports do not change under it.
deps=$(mktemp)
.venv/bin/python - > "$deps" <<'PY'
import re
try:
    import tomllib
except ImportError:          # Python 3.10: the wheel's install below gets them instead
    raise SystemExit(0)
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras, wanted, seen = project["optional-dependencies"], ["test", "bench"], set()
requirements = list(project["dependencies"])
while wanted:
    extra = wanted.pop()
    if extra in seen:
        continue
    seen.add(extra)
    for requirement in extras[extra]:
        own = re.fullmatch(r"kafkalog\[(.*)\]", requirement)
        if own:
            wanted += own.group(1).split(",")
        else:
            requirements.append(requirement)
print("\n".join(requirements))
PY
.venv/bin/python -m pip install -q -r "$deps" > "$deps.log" 2>&1 & deps_pid=$!
log=$(mktemp)
.venv/bin/python -m build --no-isolation --outdir dist . > "$log" 2>&1 || { tail -40 "$log"; exit 1; }
rm -f "$log"
wait "$deps_pid" || { echo "installing the dependencies failed:"; tail -20 "$deps.log"; exit 1; }
rm -f "$deps" "$deps.log"
wheel=$(ls dist/kafkalog-*.whl)
# Uninstalled first: pip keeps an installed kafkalog of the same version (an older build, or an
# editable install) instead of this wheel.
.venv/bin/python -m pip uninstall -q -y kafkalog 2> /dev/null || true
.venv/bin/python -m pip install -q "$wheel[test,bench]"
.venv/bin/python - "$wheel" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if name.startswith("kafkalog/") and name.endswith(".so"):
            wheel.extract(name, ".")
PY
# The checkout's kafkalog (the working directory is first on sys.path) and the installed one
.venv/bin/python -c "import kafkalog, sys; sys.exit(0 if kafkalog.compiled() and '/.venv/' \
not in kafkalog.__file__ else 'the compiled kernels did not load from the checkout')"
(cd / && "$root/.venv/bin/python" -c "import kafkalog, sys; sys.exit(0 if kafkalog.compiled() \
and '/.venv/' in kafkalog.__file__ else 'the compiled kernels did not load from .venv')")
if [ -n "$kcat_pid" ]; then
  wait "$kcat_pid" || { echo "installing kcat failed:"; tail -20 /tmp/kafkalog-kcat.log; exit 1; }
fi
