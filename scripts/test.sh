#!/usr/bin/env bash
# Builds and runs the CPU test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh "$@"
cd build && QT_QPA_PLATFORM=offscreen ctest -L cpu --output-on-failure --parallel "$(nproc)"
