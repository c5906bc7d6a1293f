#!/usr/bin/env bash
# The 2b step's clocks and power while it runs (graph replay), and the step without the graph (launch gaps).
set -u
export CUDA_VISIBLE_DEVICES=${GPU:-1}
mkdir -p $OUT/diag
nvidia-smi -i $CUDA_VISIBLE_DEVICES --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 50 > $OUT/diag/smi.csv 2>&1 &
P=$!
/tmp/base/bench_train_step --shape 2b --tokens 4096 --ckpt auto --free-gib 6.47 --steps 30 --warmup 2 2>&1 | grep -v '^{' | tail -2
kill $P
python3 - $OUT/diag/smi.csv <<'PY'
import sys, csv, statistics
rows = list(csv.reader(open(sys.argv[1])))[1:]
v = [(float(r[1].split()[0]), float(r[3].split()[0]), r[5].strip()) for r in rows if len(r) > 5 and r[1].strip()[0].isdigit()]
busy = [x for x in v if x[1] > 200]
if busy:
    print("samples busy", len(busy), "sm MHz median", statistics.median(x[0] for x in busy), "min", min(x[0] for x in busy),
          "power W median", statistics.median(x[1] for x in busy), "max", max(x[1] for x in busy))
    from collections import Counter; print("throttle reasons", Counter(x[2] for x in busy).most_common(4))
PY
/tmp/base/bench_train_step --shape 2b --tokens 4096 --ckpt auto --free-gib 6.47 --steps 6 --warmup 2 --graph 0 2>&1 | grep -v '^{' | tail -1
