#!/usr/bin/env bash
# Runs every fuzz target for a bounded time on seed corpora taken from the repository's own files.
# usage: tests/fuzz/run_fuzzers.sh BUILD_DIR [SECONDS_PER_TARGET=60]
# Exit status is non-zero when a target finds a crash (the reproducer is left in BUILD_DIR/fuzz-artifacts).
set -euo pipefail
build=${1:?usage: run_fuzzers.sh BUILD_DIR [SECONDS]}
secs=${2:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
artifacts="$build/fuzz-artifacts"
mkdir -p "$artifacts"

seed() {  # seed TARGET FILE...
  local target=$1
  shift
  mkdir -p "$work/$target"
  for f in "$@"; do cp "$f" "$work/$target/$(echo "$f" | md5sum | cut -c1-16)"; done
}
seed run_yaml $(find "$root/resources" "$root/tests" -name '*.yaml' -size -64k 2>/dev/null)
printf 'base_model: m\ndatasets:\n  - path: a.jsonl\n    type: chat\nlora_r: 8\nlora_target_groups: [attn, mlp]\n' \
  > "$work/run_yaml/inline"
seed model_config $(find "$root/tests/goldens" -name config.json -size -64k 2>/dev/null)
seed tokenizer_json $(find "$root/tests/goldens/tokenizer" -name '*.json' -size -256k 2>/dev/null)
seed safetensors_header $(find "$root/tests/goldens" -name '*.safetensors' -size -100k 2>/dev/null)
# dataset_lines: the committed seeds (first byte = type and flags, see fuzz_dataset_lines.cpp), plus the
# repository's small JSONL files behind a 0 byte (format detected from the rows).
seed dataset_lines "$root"/tests/fuzz/corpus/dataset_lines/*
for f in $(find "$root/resources" "$root/tests/goldens" -name '*.jsonl' -size -32k 2>/dev/null); do
  { printf '\0'; cat "$f"; } > "$work/dataset_lines/$(echo "$f" | md5sum | cut -c1-16)"
done

# Inputs that once crashed a target stay in its corpus: they must keep passing.
for f in "$root"/tests/fuzz/regressions/*; do
  [ -f "$f" ] || continue
  t=$(basename "$f"); t=${t%%-*}
  mkdir -p "$work/$t" && cp "$f" "$work/$t/"
done

status=0
for t in run_yaml model_config tokenizer_json safetensors_header dataset_lines; do
  bin="$build/tests/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "missing $bin (build target dt_fuzz)"; exit 2; }
  echo "== fuzz_$t for ${secs}s ($(ls "$work/$t" | wc -l) seeds)"
  if ! "$bin" "$work/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -artifact_prefix="$artifacts/$t-" -print_final_stats=1 2>&1 | tail -n 25; then
    status=1
  fi
done
exit $status
