#!/usr/bin/env bash
# Sets everything up, writes a sample partition with kafkalog, dumps and verifies it, then
# checks `kafkalog dump --json` against Kafka's own reading of every Kafka-written fixture.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m kafkalog.demo sample-data
.venv/bin/python ../shared/scripts/compare_dump.py --python .venv/bin/python
