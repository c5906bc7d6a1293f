#!/usr/bin/env bash
# PEFT round trip of our adapter export and merged export, independent of ctest:
#   1. make_models.py      tiny random Qwen3.5 checkpoints (dense VL, dense F32 text, MoE sharded per-expert)
#   2. dt_unit_tests       reads the PEFT-made fixtures, writes our adapters (OUT/<case>/ours) and merged
#                          checkpoints (OUT/<case>/merged)
#   3. check_outputs.py    PEFT loads ours (no missing keys, logits == reference adapter's) and compares our
#                          merged tensors with merge_and_unload (experts bit-exact, linears <= 1 ulp, F32 exact)
# Usage: tests/goldens/peft/check_all.sh [BUILD_DIR=build] [PYTHON=python3]
# Needs python with torch, transformers >= 5.2 (Qwen3.5), peft >= 0.19.1. Exit status 0 = all good.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
BUILD="${1:-$ROOT/build}"
PY="${2:-python3}"
WORK="$(mktemp -d -t dt_peft_check.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
"$PY" "$HERE/make_models.py" "$WORK/models" > "$WORK/make_models.log" 2>&1 || { cat "$WORK/make_models.log"; exit 1; }
DT_PEFT_MODELS="$WORK/models" DT_PEFT_OUT="$WORK/out" "$BUILD/tests/dt_unit_tests" \
  --gtest_filter='PeftIo.ReadsPeftAdaptersAndWritesThemBackUnchanged:PeftExport.*' --gtest_brief=1
"$PY" "$HERE/check_outputs.py" "$WORK/out" "$WORK/models" 2> "$WORK/check.log" || { grep -v "Loading weights" "$WORK/check.log" | tail -20; exit 1; }
