#!/usr/bin/env bash
# Multi-GPU checks of data-parallel training on a machine with >= 2 GPUs, on the bundled demo model:
#  curve    20 steps on 2 GPUs (--gpus 0,1, gradient_accumulation_steps 1) vs 1 GPU with accumulation 2 (the same
#           global batch): per-step loss, grad norm and eval loss; LoRA weights hashed on every worker after
#           every step (--check-replicas: the run fails unless all hashes agree)
#  kill     SIGKILL worker 1 of a 2-GPU run after its first checkpoint: seconds until the whole run ends, its
#           status, the checkpoints; then --resume on 1 GPU and the rest of the 1-GPU reference curve
#  nodes    "two nodes": two separately started processes (WORLD_SIZE=2, MASTER_ADDR=127.0.0.1, one GPU each,
#           LOCAL_RANK 0 both), NCCL's shared-memory and peer-to-peer transports off (its network transport,
#           as between machines); same curve as 1 GPU
# GPUS=4 runs curve and kill on 4 GPUs (reference: 1 GPU with accumulation 4).
#   [GPUS=2] [SECTIONS="curve kill nodes"] tests/cuda/dist_check.sh DELTATUNE_BIN DEMO_DIR WORK_DIR     (BACKEND=cpu: a dry run of the script itself)
set -u
BIN=${1:?deltatune}; DEMO=${2:?resources/demo}; W=${3:?work dir}
export NCCL_NVLS_ENABLE=0
N=${GPUS:-2}
LIST=$(seq -s, 0 $((N - 1)))
mkdir -p "$W"
run_yaml() {  # name accumulation steps save_steps
  cat > "$W/$1.yaml" <<EOF
base_model: $DEMO/model
datasets:
  - path: $DEMO/data/demo_chat.jsonl
    type: chat
val_set_size: 0.05
sequence_len: 256
sample_packing: true
micro_batch_size: 2
gradient_accumulation_steps: $2
max_steps: $3
save_steps: $4
eval_steps: 10
learning_rate: 0.003
warmup_steps: 2
lora_r: 8
lora_alpha: 16
lora_dropout: 0.1
backend: ${BACKEND:-cuda}
output_dir: $W/$1.out
dataset_prepared_path: $W/cache
EOF
}
compare() {  # reference_db other_db label [last_step: compare steps up to it (default all)]
  python3 - "$@" <<'PY'
import sqlite3, sys
ref, got, label = sys.argv[1], sys.argv[2], sys.argv[3]
last = int(sys.argv[4]) if len(sys.argv) > 4 else 1 << 62
def rows(db):
    c = sqlite3.connect(db)
    rid = c.execute("select id from runs order by created_at desc limit 1").fetchone()[0]
    cols = [r[1] for r in c.execute("pragma table_info(metrics)")]
    q = "select step, loss, grad_norm, eval_loss from metrics where run_id=? order by step"
    return {r[0]: r[1:] for r in c.execute(q, (rid,))}
a, b = rows(ref), rows(got)
steps = sorted(s for s in set(a) & set(b) if s <= last)
dl = max(abs(a[s][0] - b[s][0]) / abs(a[s][0]) for s in steps)
dg = max(abs(a[s][1] - b[s][1]) / abs(a[s][1]) for s in steps)
ev = [s for s in steps if a[s][2] is not None and a[s][2] >= 0]
de = max([abs(a[s][2] - b[s][2]) / a[s][2] for s in ev] or [0])
tol = 1e-3
ok = len(steps) == len([s for s in a if s <= last]) and dl <= tol and de <= tol
print(f"{label}: {len(steps)} steps compared (reference {len(a)}); max relative difference: loss {dl:.2e}, "
      f"grad_norm {dg:.2e}, eval_loss {de:.2e} (tolerance {tol:g}) -> {'PASS' if ok else 'FAIL'}")
shown = steps if len(steps) <= 40 else steps[:10] + steps[-10:]
print(f"{label}: losses ref  " + " ".join(f"{a[s][0]:.5f}" for s in shown))
print(f"{label}: losses got  " + " ".join(f"{b[s][0]:.5f}" for s in shown))
PY
}
status_of() { python3 -c "
import sqlite3,sys; c=sqlite3.connect('$1'); r=c.execute('select id,status,steps,device from runs order by created_at desc limit 1').fetchone(); print(*r, sep='|')
for (m,) in c.execute('select message from events where run_id=? and level=\"error\"', (r[0],)): print('  event:', m)"; }

want() { [[ " ${SECTIONS:-curve kill nodes} " == *" $1 "* ]]; }

if want curve; then
echo "== curve"
run_yaml one $N 20 0; run_yaml two 1 20 0
"$BIN" train "$W/one.yaml" --db "$W/one.db" --gpus 0 > "$W/one.log" 2>&1; echo "1 GPU exit $?"
"$BIN" train "$W/two.yaml" --db "$W/two.db" --gpus $LIST --check-replicas > "$W/two.log" 2>&1; echo "$N GPUs exit $?"
grep -E "data parallel|launcher|error" "$W/two.log" | head -5
echo "replica hashes agreed after $(grep -c 'LoRA weights hash' "$W/two.log") steps; last: $(grep 'LoRA weights hash' "$W/two.log" | tail -1)"
compare "$W/one.db" "$W/two.db" "$N GPUs vs 1 GPU"
grep -E "^step (1|20)/" "$W/one.log" "$W/two.log"

fi

if want kill; then
echo "== kill"
run_yaml kill 1 600 50; run_yaml killref $N 600 0
"$BIN" train "$W/kill.yaml" --db "$W/kill.db" --gpus $LIST > "$W/kill.log" 2>&1 &
L=$!
for i in $(seq 1 6000); do [ -d "$W/kill.out/checkpoint-50" ] && break; sleep 0.01; done
V=""
for d in /proc/[0-9]*; do
  [ "$(awk '{print $4}' $d/stat 2>/dev/null)" = "$L" ] && tr '\0' '\n' < $d/environ | grep -qx "RANK=1" && V=${d#/proc/}
done
T0=$(date +%s.%N); kill -9 "$V"; wait $L; RC=$?; T1=$(date +%s.%N)
echo "killed worker 1 (pid $V) after checkpoint $(ls "$W/kill.out" | grep checkpoint | head -1); launcher exit $RC after $(python3 -c "print(f'{$T1-$T0:.2f}')") s"
grep -E "launcher|crashed|error" "$W/kill.log" | head -6
status_of "$W/kill.db"
ID=$(python3 -c "import sqlite3; print(sqlite3.connect('$W/kill.db').execute('select id from runs').fetchone()[0])")
"$BIN" train --resume "$ID" --db "$W/kill.db" --gpus 0 > "$W/resume.log" 2>&1; echo "resume on 1 GPU exit $?"
grep -E "resuming" "$W/resume.log"
status_of "$W/kill.db"
"$BIN" train "$W/killref.yaml" --db "$W/killref.db" --gpus 0 > "$W/killref.log" 2>&1
compare "$W/killref.db" "$W/kill.db" "$N GPUs killed, resumed on 1 vs 1 GPU (steps <= 100)" 100
compare "$W/killref.db" "$W/kill.db" "$N GPUs killed, resumed on 1 vs 1 GPU (all steps)"

fi

if want nodes; then
echo "== two nodes"
run_yaml nodes 1 20 0
P=$((29000 + RANDOM % 1000))
( export RANK=1 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P CUDA_VISIBLE_DEVICES=1 \
         NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1; "$BIN" train "$W/nodes.yaml" --db "$W/nodes1.db" --check-replicas > "$W/node1.log" 2>&1 ) &
N1=$!
sleep 2
( export RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P CUDA_VISIBLE_DEVICES=0 \
         NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_DEBUG=INFO; "$BIN" train "$W/nodes.yaml" --db "$W/nodes.db" --check-replicas > "$W/node0.log" 2>&1 )
echo "node 0 exit $?"; wait $N1; echo "node 1 exit $?"
grep -oE "via NET/[A-Za-z]+[^ ]*|Using network [A-Za-z]+" "$W/node0.log" | sort | uniq -c | head -3
echo "replica hashes agreed after $(grep -c 'LoRA weights hash' "$W/node0.log") steps"
compare "$W/one.db" "$W/nodes.db" "two nodes vs 1 GPU"
fi
