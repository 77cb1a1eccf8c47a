#!/usr/bin/env bash
# Sets everything up, then runs every check once, printing each stage's wall time and the total:
# setup, ruff, mypy, the whole test suite (compiled kernels), the kernels' tests under ASan and
# UBSan, asv check, the wheel, the Spark cluster example. Arguments are passed to pytest.
#
# The pure-Python kernels are proven in the same run by the twin tests, which call both kernel
# sets on the same inputs. To run the whole suite on the pure-Python kernels instead:
#   KAFKALOG_NO_EXTENSIONS=1 .venv/bin/python -m pytest -q
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
times=()
current=
report() {  # on exit, also after a failure (the failed stage's time so far)
  echo "== wall time per stage"
  if [ ${#times[@]} -gt 0 ]; then printf '%s\n' "${times[@]}"; fi
  if [ -n "$current" ]; then printf '%-8s %5d s (failed)\n' "$current" $((SECONDS - t0)); fi
  printf '%-8s %5d s\n' total $((SECONDS - started))
}
trap report EXIT
stage() {  # stage NAME DESCRIPTION COMMAND...: runs COMMAND and records its wall time
  current=$1 t0=$SECONDS
  echo "== $1: $2"
  shift 2
  "$@"
  times+=("$(printf '%-8s %5d s' "$current" $((SECONDS - t0)))")
  current=
}
asv_check() {
  .venv/bin/asv machine --yes > /dev/null
  .venv/bin/asv check --python=same
}

stage setup "the venv and the compiled extension" bash scripts/setup.sh
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# The wheel's and the cluster example's environments are made in the background while ruff, mypy
# and pytest run: pip and venv-pack mostly wait on the network and the disk, and pytest keeps
# about one of the two cores busy. Their stages wait for them (and print their log on failure).
prep=$(mktemp -d)
bash scripts/wheel_check.sh prepare > "$prep/wheel.log" 2>&1 & wheel_prep=$!
bash scripts/spark_cluster_check.sh prepare "$prep/cluster" > "$prep/cluster.log" 2>&1 & cluster_prep=$!
trap 'kill $wheel_prep $cluster_prep 2> /dev/null || true; rm -rf "$prep"; report' EXIT
prepared() {  # prepared PID LOG: waits for a background preparation, prints its log if it failed
  wait "$1" || { echo "preparing failed:"; tail -30 "$2"; return 1; }
}
stage ruff "undefined names, unused imports and variables" \
  .venv/bin/ruff check --quiet --select F,E9 kafkalog tests bench scripts asv_benchmarks examples
stage mypy "the public API's annotations" .venv/bin/mypy kafkalog
# Two pytest processes, each given whole test files (a file's module fixtures are made once): one
# process kept about one of the two cores busy (Spark jobs, subprocesses and servers wait).
stage pytest "the whole suite, compiled kernels (pure-Python ones by their twin tests)" \
  .venv/bin/python -m pytest -q -n 2 --dist loadfile "$@"
# scripts/sanitize.sh (ASan and UBSan over the twin, fuzz, re-entrancy and live-writer tests) is
# not a stage: 162 s more took the CI past its 15 minutes (docs/reliability.md, Sanitizers).
stage asv "asv benchmark suite (discovery and setup checks)" asv_check
wheel_check() { prepared $wheel_prep "$prep/wheel.log" && WHEEL_ENV_READY=1 bash scripts/wheel_check.sh; }
stage wheel "the wheel: installed in a fresh venv, tested from outside the source tree" wheel_check
cluster_check() {
  prepared $cluster_prep "$prep/cluster.log" && CLUSTER_ENV="$prep/cluster" bash scripts/spark_cluster_check.sh
}
stage cluster "the README's Spark cluster example (local-cluster executors, packed environment)" \
  cluster_check
