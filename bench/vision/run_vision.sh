#!/bin/bash
# The vision tower bench, ours then transformers + PEFT on the same GPU in the same call:
#   bench/vision/run_vision.sh BUILD_DIR [args for both, e.g. --images 1 --side 1024]
set -u
B=${1:?build folder}; shift
"$B/bench/bench_vision_tower" "$@"
python3 "$(dirname "$0")/hf_vision_tower.py" "$@"
