#!/usr/bin/env bash
# On a CUDA machine (the device machine): every CUDA test, the kernel timings, and the benchmarks against
# HF transformers + PEFT and flash-linear-attention. Binaries may come from a build folder or a folder of
# copied binaries (dt_cuda_tests, bench_train_step, bench_gdn side by side).
#   scripts/gpu_check.sh BIN_DIR [WHEEL_DIR] [quick]
# WHEEL_DIR: flash-linear-attention, fla-core and einops wheels (HF's fast GDN path and bench_gdn's
# reference); "quick" runs the tests and timings only. Logs and JSON lines go to $OUT (or /tmp).
set -u
BIN=$(cd "${1:?folder with dt_cuda_tests, bench_train_step, bench_gdn}" && pwd)
WHL=${2:-}
MODE=${3:-full}
HERE=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-/tmp}
export DT_GOLDENS=${DT_GOLDENS:-$HERE/tests/goldens}
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
t() { [ -x "$1" ] && echo "$1" || echo "$2"; }
TESTS=$(t "$BIN/dt_cuda_tests" "$BIN/tests/dt_cuda_tests")
STEP=$(t "$BIN/bench_train_step" "$BIN/bench/bench_train_step")
GDN=$(t "$BIN/bench_gdn" "$BIN/bench/bench_gdn")
echo "== CUDA tests (backend ops vs CPU, model vs HF goldens, 20 steps vs CPU)"
timeout 300 "$TESTS" 2>&1 | tee "$OUT/cuda_tests.log" | grep -E "^\[e2e\]|FAILED|PASSED|Failure|Expected|actual"
echo "== kernel timings"
timeout 200 "$TESTS" --gtest_also_run_disabled_tests --gtest_filter='BackendTiming.*' 2>&1 | tee "$OUT/timing.log" |
  grep -vE "^\[|^$|^Note|^Running"
[ "$MODE" = quick ] && exit 0
echo "== training step vs HF + PEFT (and + FLA when wheels are given)"
STEPS=${STEPS:-3} "$HERE/bench/train_step/run_train_step.sh" "$STEP" "$WHL" ${SHAPES:-2b 0.8b 9b} 2>&1 | grep -v '^{' | tail -14
"$STEP" --shape 0.8b --tokens 16384 --steps 2 --warmup 1 --ckpt 1 | grep '^{' | tee -a "$OUT/train_step.jsonl"
"$STEP" --shape 35b-a3b --layers 4 --tokens 4096 --steps 2 --warmup 1 --ckpt 1 | grep '^{' | tee -a "$OUT/train_step.jsonl"
PYTHONUNBUFFERED=1 python3 "$HERE/bench/train_step/hf_train_step.py" --shape 35b-a3b --layers 4 --tokens 4096 --steps 2 \
  --warmup 1 --fla 0 2>/dev/null | grep '^{' | tee -a "$OUT/train_step.jsonl"
if [ -n "$WHL" ]; then
  echo "== GDN core vs flash-linear-attention"
  TOKENS=${GDN_TOKENS:-4096,8192,16384} "$HERE/bench/gdn/run_gdn.sh" "$GDN" "$WHL" 2>&1 | grep -v '^{' | tail -6
fi
