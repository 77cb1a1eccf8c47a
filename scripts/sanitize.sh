#!/usr/bin/env bash
# Builds the compiled extension with AddressSanitizer and UndefinedBehaviorSanitizer and runs,
# under them, the tests that drive the kernels hardest: the twin tests (both kernel sets on the
# same inputs), the fuzz and hostile-input tests, and the re-entrancy, thread, live-writer and
# offsets-must-increase tests when the checkout has them. Fails on any sanitizer report (and on any failed
# test); prints each step's wall time. Arguments are passed to pytest (e.g. -x, -k NAME).
#
# The build happens in a copy of the checkout (build/sanitize/src; the checkout's own compiled
# module is never touched) and is incremental: Cython and the compiler run again only for sources
# that changed since the last run. Only the extension is instrumented; CPython, numpy and pyarrow
# are not, so the ASan runtime is preloaded (LD_PRELOAD) into every Python process of the run.
#   SANITIZE_JOBS   pytest processes (default 2; 0 runs in this process)
#   SANITIZE_FUZZ   also run scripts/fuzz_stress.py for this many cases, plain and --crc-valid
#                   (default 0: not run)
#   PYTHON          the interpreter with the test dependencies (default .venv/bin/python)
#   KAFKALOG_SHARED the shared fixtures (default ../shared beside the checkout)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
started=$SECONDS
PY=${PYTHON:-$root/.venv/bin/python}
shared=$(realpath -m "${KAFKALOG_SHARED:-$root/../shared}")
work=$root/build/sanitize
src=$work/src
logs=$work/reports
report() {
  local status=$?
  printf 'sanitize: %s after %d s (build %s s, tests %s s%s)\n' \
    "$([ $status -eq 0 ] && echo clean || echo FAILED)" $((SECONDS - started)) \
    "${build_s:-?}" "${tests_s:-?}" "${fuzz_s:+, fuzz $fuzz_s s}"
}
trap report EXIT

# The copy: the checkout's files (tracked or not, except build outputs, venvs and data), with
# the previous run's generated C, objects and module put back so the build is incremental
# (cythonize and build_ext compare modification times, which tar keeps).
t0=$SECONDS
mkdir -p "$work/cache"
for kept in kafkalog/_core.c build; do
  if [ -e "$src/$kept" ]; then rm -rf "$work/cache/${kept##*/}"; mv "$src/$kept" "$work/cache/"; fi
done
for so in "$src"/kafkalog/_core*.so; do [ -e "$so" ] && mv "$so" "$work/cache/"; done
rm -rf "$src" && mkdir -p "$src"
tar -C "$root" -cf - --exclude=./.git --exclude='./.venv*' --exclude=./build --exclude=./dist \
  --exclude='./sample-data*' --exclude=./.asv --exclude=.hypothesis --exclude=.pytest_cache \
  --exclude=__pycache__ --exclude='*.so' --exclude=./kafkalog/_core.c --exclude=./kafkalog/_core.html . \
  | tar -C "$src" -xf -
[ -e "$work/cache/_core.c" ] && mv "$work/cache/_core.c" "$src/kafkalog/"
[ -e "$work/cache/build" ] && mv "$work/cache/build" "$src/"
for so in "$work"/cache/_core*.so; do [ -e "$so" ] && mv "$so" "$src/kafkalog/"; done
echo "== build: the extension with -fsanitize=address,undefined (log: $work/build.log)"
(cd "$src" && KAFKALOG_SANITIZE=1 "$PY" setup.py build_ext --inplace -j 1 > "$work/build.log" 2>&1) \
  || { tail -40 "$work/build.log"; exit 1; }
build_s=$((SECONDS - t0))

asan_lib=$(gcc -print-file-name=libasan.so)
ubsan_lib=$(gcc -print-file-name=libubsan.so)
so=$(ls "$src"/kafkalog/_core*.so)
readelf -d "$so" | grep -q 'NEEDED.*libasan' \
  || { echo "$so is not linked with AddressSanitizer"; exit 1; }
# Every report goes to a file of $logs (also a subprocess's); any file there fails the run.
rm -rf "$logs" && mkdir -p "$logs"
export LD_PRELOAD=$asan_lib:$ubsan_lib${LD_PRELOAD:+:$LD_PRELOAD}
# detect_leaks=0: CPython's own allocations look leaked at exit. handle_sigbus=0 and
# allow_user_segv_handler=1: kafkalog's SIGBUS handler (a file shrinking under a mapping
# becomes a typed error) must be the one that runs. detect_odr_violation=0: numpy and pyarrow
# load libraries that define the same globals.
export ASAN_OPTIONS="detect_leaks=0:handle_sigbus=0:allow_user_segv_handler=1:\
detect_odr_violation=0:halt_on_error=1:abort_on_error=0:log_path=$logs/asan"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
# UBSan beside ASan (gcc) ignores log_path: its call to set the report path reaches ASan's copy
# of that function. Every Python process of the run (PYTHONPATH reaches subprocesses) sets
# UBSan's own at startup, so a report lands in $logs and is not lost in a captured stderr.
mkdir -p "$work/site"
cat > "$work/site/sitecustomize.py" <<PY
import ctypes
ctypes.CDLL("$ubsan_lib").__sanitizer_set_report_path(b"$logs/ubsan")
PY
export PYTHONPATH=$work/site${PYTHONPATH:+:$PYTHONPATH}
# Python objects (bytes, bytearrays: the buffers the tests hand the kernels) from malloc, not
# pymalloc's arenas, so ASan sees their bounds.
export PYTHONMALLOC=malloc
export KAFKALOG_SHARED=$shared
unset KAFKALOG_NO_EXTENSIONS

cd "$src"
"$PY" -c "import kafkalog, sys; sys.exit(0 if kafkalog.compiled() and \
kafkalog._core.__file__ == '$so' else 'the sanitized kafkalog._core did not load')"
tests=()
for pattern in test_twins\*.py test_kernels.py test_kernel_selection.py test_read_kernels.py \
    test_crc_kernel.py test_compaction_kernels.py test_fuzz_\*.py test_hostile_files.py \
    test_reentrancy\*.py test_live_writer\*.py test_shrink\*.py test_offsets_increase\*.py; do
  for f in tests/$pattern; do [ -e "$f" ] && tests+=("$f"); done
done
# test_faults.py: only its fuzzers (its fault injection and thread races run no new kernel code).
tests+=(tests/test_faults.py::test_fuzz_walk_and_decode tests/test_faults.py::test_fuzz_codecs
  tests/test_faults.py::test_fuzz_index_checkpoint_and_snapshot_readers
  tests/test_faults.py::test_fuzz_log_open tests/test_faults.py::test_fuzz_stress_regressions)
jobs=${SANITIZE_JOBS:-2}
xdist=()
[ "$jobs" -gt 0 ] && xdist=(-n "$jobs" --dist loadfile)
echo "== tests: ${#tests[@]} selections under ASan+UBSan, ${jobs} processes"
t0=$SECONDS
status=0
"$PY" -m pytest -q -p no:cacheprovider "${xdist[@]}" "${tests[@]}" "$@" || status=$?
tests_s=$((SECONDS - t0))
fuzz=${SANITIZE_FUZZ:-0}
if [ "$fuzz" -gt 0 ]; then
  echo "== fuzz: scripts/fuzz_stress.py $fuzz, plain and --crc-valid"
  "$PY" scripts/fuzz_stress.py "$fuzz" || status=$?
  "$PY" scripts/fuzz_stress.py "$fuzz" --crc-valid || status=$?
  fuzz_s=$((SECONDS - t0 - tests_s))
fi
if compgen -G "$logs/*" > /dev/null; then
  echo "== sanitizer reports ($(ls "$logs" | wc -l) files in $logs; the first 40 lines of each)"
  for f in "$logs"/*; do echo "-- $f"; head -40 "$f"; done
  exit 1
fi
exit $status
