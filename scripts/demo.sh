#!/usr/bin/env bash
# Sets everything up, writes a sample partition with kafkalog (sample-data/demo-0, and a Kafka
# 0.7 one in sample-data-0.7/), dumps and verifies it: needs the clone alone. The Kafka-written
# fixtures (../shared) are the test command's (scripts/test.sh: tests/test_dump.py compares
# `kafkalog dump --json` with Kafka's own reading of every one).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/python -m kafkalog.demo sample-data
