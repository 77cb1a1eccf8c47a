#!/usr/bin/env bash
# Build kafkalog/spark/kafkalog-spark.jar (the JVM reader kafkalog.spark.read uses; the wheel
# ships it) with plain javac + jar against the jars PySpark ships (no Maven: nothing is
# downloaded). Usage: jvm/build.sh [python] (default: the venv's python, else
# python3), prints the jar's path.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${1:-}"
if [ -z "$python" ]; then
    if [ -x "$here/../.venv/bin/python" ]; then python="$here/../.venv/bin/python"; else python=python3; fi
fi
jars="$("$python" -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# --release 17: the bytecode runs on the JDK 17 Spark 4 requires, whatever javac builds it
javac --release 17 -Xlint:all,-serial,-processing -nowarn -d "$out/classes" -cp "$jars/*" \
    $(find "$here/src" -name '*.java')
cp -r "$here/resources/." "$out/classes/"
target="$here/../kafkalog/spark/kafkalog-spark.jar"
# written beside and renamed: a Spark session that has the jar open never sees half of one
jar --create --file "$out/kafkalog-spark.jar" -C "$out/classes" .
mv "$out/kafkalog-spark.jar" "$target"
echo "$(cd "$(dirname "$target")" && pwd)/kafkalog-spark.jar"
