#!/usr/bin/env bash
# HF + PEFT + FLA + Liger 2b step (the bar's anchor), Triton cache kept in /tmp/tc and tarred to $OUT/tc.tar.xz.
# Env GPU (0). Uses .devcarry/wheels.
set -u
export NCCL_NVLS_ENABLE=0 CUDA_VISIBLE_DEVICES=${GPU:-0} TRITON_CACHE_DIR=/tmp/tc TRITON_CACHE_AUTOTUNING=1 PYTHONUNBUFFERED=1
mkdir -p /tmp/tc $OUT/hf
[ -f .devcarry/tc/tc.tar.xz ] && tar -xJf .devcarry/tc/tc.tar.xz -C /tmp/tc
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/fla_site .devcarry/wheels/*.whl
for i in $(seq 1 ${HF_RUNS:-1}); do
  PYTHONPATH=/tmp/fla_site timeout ${HF_LIMIT:-420} python3 bench/train_step/hf_train_step.py --shape 2b --tokens 4096 --steps 5 \
    --fla 1 --liger 1 --ckpt 1 > $OUT/hf/hf2b_${HF_TAG:-}$i.log 2>&1
  echo "hf run $i rc=$?"; grep '^{' $OUT/hf/hf2b_${HF_TAG:-}$i.log | python3 -c "import json,sys; [print({k: r.get(k) for k in ('impl','shape','tokens_per_s','peak_vram_gib','step_ms')}) for r in map(json.loads, sys.stdin)]"
done
tail -3 $OUT/hf/hf2b_${HF_TAG:-}1.log
[ -f .devcarry/tc/tc.tar.xz ] || (cd /tmp/tc && tar -cJf $OUT/tc.tar.xz .) ; ls -la $OUT/tc.tar.xz 2>/dev/null
