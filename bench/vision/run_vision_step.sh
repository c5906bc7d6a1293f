#!/bin/bash
# The 9B vision + text LoRA step, ours then transformers + PEFT (+ flash-linear-attention when its wheels are given)
# on the same GPU in the same call:
#   bench/vision/run_vision_step.sh BUILD_DIR [WHEEL_DIR] [args for both, e.g. --tokens 4096 --side 1024]
# WHEEL_DIR: flash-linear-attention, fla-core, einops wheels ("" runs HF with PyTorch's GDN path). HF's first step
# compiles FLA's Triton kernels: give it minutes (HF_LIMIT, default 600 s).
set -u
B=${1:?build folder}; WHL=${2:-}; shift 2 2>/dev/null || shift $#
HERE=$(cd "$(dirname "$0")" && pwd)
"$B/bench/bench_vision_step" "$@"
FLA=0
if [ -n "$WHL" ] && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fla_site "$WHL"/*.whl; then
  FLA=1
fi
PYTHONPATH=/tmp/fla_site PYTHONUNBUFFERED=1 timeout -s USR1 "${HF_LIMIT:-600}" python3 "$HERE/hf_vision_step.py" --fla $FLA "$@"
