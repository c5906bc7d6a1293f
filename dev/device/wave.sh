#!/usr/bin/env bash
# One helper round on 2 GPUs: LANE0 / LANE1 = space-separated helper names (or lead:SCRIPT) run in order on GPU 0 / 1.
set -u
[ -f .devcarry/common_xz/lib.tar.xz ] && mkdir -p /tmp/common && tar -xJf .devcarry/common_xz/lib.tar.xz -C /tmp/common
export LD_LIBRARY_PATH=/tmp/common/lib:$PWD/.devcarry/common/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-} DT_GOLDENS=$PWD/tests/goldens NCCL_NVLS_ENABLE=0
bash dev/device/unpack.sh .devcarry/${BASE:-base_w} /tmp/base; [ -d .devcarry/base_t ] && bash dev/device/unpack.sh .devcarry/base_t /tmp/base
lane() {  # gpu items...
  local g=$1; shift
  for h in "$@"; do
    local t0=$SECONDS
    case $h in
      lead:*) GPU=$g OUT=$OUT timeout ${HELPER_LIMIT:-300} bash dev/device/${h#lead:} > $OUT/lane${g}_${h#lead:}.txt 2>&1 ;;
      *) GPU=$g OUT=$OUT timeout ${HELPER_LIMIT:-300} bash .devcarry/$h/run.sh > $OUT/lane${g}_$h.txt 2>&1 ;;
    esac
    echo "== $h on GPU $g: rc=$? $((SECONDS - t0)) s" >> $OUT/lane${g}_${h#lead:}.txt
  done
}
lane 0 ${LANE0:-} &
lane 1 ${LANE1:-} &
wait
for f in $OUT/lane*.txt; do echo "######## $f"; tail -c 2500 $f; done
