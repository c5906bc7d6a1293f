#!/usr/bin/env bash
# The package check on a GPU machine: the unpacked deltatune .deb run as on a machine with only Debian and an
# NVIDIA driver, the loader restricted to the distribution's library folders plus the driver's libcuda folder
# (no ld.so cache, so no CUDA toolkit). NVIDIA's libraries come from deltatune-cuda-libs when its .deb is given,
# else they are copied unmodified from a CUDA install (the same files that package holds; sha256 printed).
# Checks: `deltatune info` (driver, runtime, GPUs), the demo on the GPU, a 0.8B-shape run (random weights made by
# packaging/make_random_checkpoint.py with transformers) and, with 2+ GPUs, a 2-process data-parallel demo run
# started the torchrun way (NCCL from the private folder).
#   packaging/check_deb_gpu.sh DEB_DIR WORK_DIR     env: DEPS_DIR (unpacked Debian .debs of missing deps),
#                                                   CUDA_LIBS_FROM (default /usr/local/cuda/lib64)
set -uo pipefail
DEBS=$(realpath "${1:?folder with deltatune_*.deb}"); W=$(realpath -m "${2:?work dir}")
HERE=$(cd "$(dirname "$0")" && pwd)
X=$W/root; mkdir -p "$X" "$W/home"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0} HOME=$W/home XDG_DATA_HOME=$W/home/.local/share
dpkg-deb -x "$(ls -t "$DEBS"/deltatune_*.deb | head -1)" "$X"
priv=$X/usr/lib/deltatune
if ls "$DEBS"/deltatune-cuda-libs_*.deb >/dev/null 2>&1; then
  dpkg-deb -x "$(ls -t "$DEBS"/deltatune-cuda-libs_*.deb | head -1)" "$X"; echo "NVIDIA libraries: deltatune-cuda-libs"
else
  from=${CUDA_LIBS_FROM:-/usr/local/cuda/lib64}
  for l in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
    f=$from/$l; [ -e "$f" ] || f=$(ldconfig -p | awk -v l="$l" '$1 == l {print $NF; exit}')
    [ -e "$f" ] && cp -L "$f" "$priv/$l" || echo "missing: $l (looked in $from and the ld.so cache)"
  done
  echo "NVIDIA libraries copied unmodified from ${from}:"; (cd "$priv" && sha256sum lib*.so.*[0-9] | grep -v deltatune)
fi
cuda_dir=$(dirname "$(ldconfig -p | awk '/libcuda.so.1 /{print $NF; exit}')")
libs=/lib/x86_64-linux-gnu:/usr/lib/x86_64-linux-gnu${DEPS_DIR:+:$DEPS_DIR}:$cuda_dir
run() { /lib64/ld-linux-x86-64.so.2 --inhibit-cache --library-path "$libs" "$@"; }
dt=$X/usr/bin/deltatune; demo=$X/usr/share/deltatune/demo
fail=0
check() { local name=$1; shift; local t0=$SECONDS; "$@"; local rc=$?; echo "$name: rc=$rc, $((SECONDS - t0)) s"; [ $rc -eq 0 ] || fail=1; }
cd "$W"
check version run "$dt" --version
check info run "$dt" info
check demo run "$dt" demo --backend cuda > "$W/demo.log" 2>&1; grep -m2 -iE "backend|device" "$W/demo.log"; tail -2 "$W/demo.log"
python3 "$HERE/make_random_checkpoint.py" 0.8b "$W/m08" "$demo/model" | tail -1
sed -e "s|^base_model:.*|base_model: $W/m08|" -e "s|^sequence_len:.*|sequence_len: 2048|" -e "s|^max_steps:.*|max_steps: 12|" \
    -e "s|^backend:.*|backend: cuda|" -e "s|^output_dir:.*|output_dir: $W/runs/r08|" -e "s|^run_name:.*|run_name: r08|" \
    -e "s|^eval_steps:.*|eval_steps: 6|" -e "s|^save_steps:.*|save_steps: 12|" -e "s|^micro_batch_size:.*|micro_batch_size: 1|" \
    -e "s|path: data/|path: $demo/data/|" "$demo/demo_run.yaml" > r08.yaml
check 0.8b-shape run "$dt" train r08.yaml --db "$W/r08.db" > "$W/r08.log" 2>&1; grep -m2 -iE "backend|device" "$W/r08.log"; tail -3 "$W/r08.log"
if [ "$(nvidia-smi -L | wc -l)" -ge 2 ]; then
  sed -e "s|^backend:.*|backend: cuda|" -e "s|^output_dir:.*|output_dir: $W/runs/dp|" -e "s|^run_name:.*|run_name: dp|" \
      -e "s|path: data/|path: $demo/data/|" -e "s|^base_model:.*|base_model: $demo/model|" "$demo/demo_run.yaml" > dp.yaml
  P=$((29000 + RANDOM % 1000))
  (export RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P; run "$dt" train dp.yaml --db "$W/dp1.db" --check-replicas > "$W/dp1.log" 2>&1) &
  check "2-process data parallel" env RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P \
      /lib64/ld-linux-x86-64.so.2 --inhibit-cache --library-path "$libs" "$dt" train dp.yaml --db "$W/dp.db" --check-replicas > "$W/dp0.log" 2>&1
  wait $! || fail=1
  grep -m1 -i "data parallel" "$W/dp0.log"; echo "replica hashes agreed after $(grep -c 'LoRA weights hash' "$W/dp0.log") steps"; tail -2 "$W/dp0.log"
fi
[ $fail -eq 0 ] && echo "GPU package check: ok" || { echo "GPU package check: FAILED"; exit 1; }
