#!/usr/bin/env bash
# Final call (2 x H200): final main's binaries in .devcarry/final (xz). GPU 0: all 1-GPU tests, the CLI demo on the
# GPU, then ours timed; GPU 1: HF's first run (Triton compile, unless .devcarry/tc has the cache). Then the 2-GPU tests,
# then HF + PEFT + FLA + Liger 2b and ours alternating on GPU 1.
set -u
mkdir -p /tmp/common && tar -xJf .devcarry/common_xz/lib.tar.xz -C /tmp/common
export LD_LIBRARY_PATH=/tmp/common/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-} DT_GOLDENS=$PWD/tests/goldens NCCL_NVLS_ENABLE=0
bash dev/device/unpack.sh .devcarry/final /tmp/fin
mkdir -p /tmp/fin/bin /tmp/fin/lib/deltatune $OUT/fin
mv /tmp/fin/deltatune /tmp/fin/bin/ && mv /tmp/fin/libdeltatune-cuda.so /tmp/fin/lib/deltatune/
B=/tmp/fin/bench_train_step
ours() {  # label args...
  local l=$1; shift
  timeout 150 $B --tokens 4096 --steps 6 --warmup 2 "$@" > $OUT/fin/$l.log 2>&1
  python3 - $OUT/fin/$l.log $l <<'PY'
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{"bench":"train_step"'):
        j = json.loads(line)
        print(f"{sys.argv[2]:16} {j['setting']:22} step {j['step_ms']:8.2f} fwd_bwd {j['fwd_bwd_ms']:8.2f} tok/s {j['tokens_per_s']:8.0f} peak {j['peak_vram_gib']:.3f} pred {j['predicted_peak_gib']:.3f} mfu {j['mfu']:.3f} loss {j['loss']:.5f} | {j['recompute_keep']}")
PY
}
lane0() {
  export CUDA_VISIBLE_DEVICES=0
  local t0=$SECONDS
  timeout 220 /tmp/fin/dt_cuda_tests --gtest_filter='-*2gpus*' > $OUT/fin/tests.log 2>&1
  echo "tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/fin/tests.log | tr '\n' ' ') ($((SECONDS - t0)) s)"
  grep -E '^\[  FAILED  \]' $OUT/fin/tests.log | head
  (R=$PWD; cd /tmp && rm -rf runs && DELTATUNE_DEMO_DIR=$R/resources/demo timeout 90 /tmp/fin/bin/deltatune demo > $OUT/fin/demo.log 2>&1; echo "demo rc=$?"; tail -4 $OUT/fin/demo.log; ls runs/demo 2>/dev/null | head)
  ours 2b_fp32_a --shape 2b --ckpt auto --free-gib 6.47
  ours 2b_bf16 --shape 2b --ckpt auto --free-gib 6.47 --loss-logits bf16
  ours 9b_21.4 --shape 9b --ckpt auto --free-gib 21.4
  ours 35b4 --shape 35b-a3b --layers 4 --ckpt auto
  OUT=$OUT/fin timeout 60 bash scripts/profile_gdn.sh /tmp/fin/bench_gdn --tokens 8192 --keep states | tail -9; rm -f $OUT/fin/profile_gdn.csv
  echo "lane0 $((SECONDS - t0)) s"
}
lane1() {
  GPU=1 HF_LIMIT=${HF_LIMIT:-420} bash dev/device/hf_warm.sh
}
lane0 > $OUT/fin/lane0.txt 2>&1 &
lane1 > $OUT/fin/lane1.txt 2>&1 &
wait
cat $OUT/fin/lane0.txt $OUT/fin/lane1.txt
t0=$SECONDS
timeout 120 /tmp/fin/dt_cuda_tests --gtest_filter='*2gpus*' > $OUT/fin/tests2.log 2>&1
echo "2-GPU tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' $OUT/fin/tests2.log | tr '\n' ' ') ($((SECONDS - t0)) s)"
export CUDA_VISIBLE_DEVICES=1
for r in $(seq 1 ${ALT_ROUNDS:-1}); do
  [ $((SECONDS - t0)) -gt ${ALT_BUDGET:-200} ] && break
  HF_TAG=alt$r GPU=1 HF_RUNS=1 HF_LIMIT=150 bash dev/device/hf_warm.sh 2>&1 | grep -E "hf run|tokens_per_s"
  ours 2b_fp32_alt$r --shape 2b --ckpt auto --free-gib 6.47
done
