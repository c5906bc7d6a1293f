#!/usr/bin/env bash
# Remakes the README's image-row screenshots (docs/img/09_vision_model.png, 10_vision_data.png, 11_vision_train.png)
# with the studio's own --screenshot-dir: a run on the tiny vision-language checkpoint of tests/goldens/vision and its chat rows
# (the row with three images first), trained a few steps on the CPU backend under Xvfb in a scratch HOME.
# Usage: docs/img/make_vision_screenshots.sh [STUDIO=build/app/deltatune-studio]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
studio=$(realpath "${1:-$root/build/app/deltatune-studio}")
goldens=$root/tests/goldens/vision
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/data" "$work/home"
cp -r "$goldens/images" "$work/data/"
sed "s|@VISION_GOLDENS@|$goldens|" "$goldens/chat_rows.jsonl" > "$work/data/all.jsonl"
{ sed -n 3p "$work/data/all.jsonl"; sed -n 1,2p "$work/data/all.jsonl"; } > "$work/data/image_chat.jsonl"
cat > "$work/run.yaml" <<YAML
base_model: $goldens/model
datasets:
  - path: data/image_chat.jsonl
    type: chat
val_set_size: 0
sequence_len: 256
lora_r: 8
lora_alpha: 16
lora_target_groups: [attn, linear_attn, mlp, vision]
micro_batch_size: 1
max_steps: 2000
learning_rate: 0.001
output_dir: runs/vision
run_name: vision-demo
YAML
home=$work/home
HOME="$home" XDG_DATA_HOME="$home/.local/share" XDG_CONFIG_HOME="$home/.config" XDG_CACHE_HOME="$home/.cache" \
  xvfb-run -a -s '-screen 0 1600x1300x24' "$studio" "$work/run.yaml" --start --backend cpu \
  --screenshot-dir "$work/shots" --screenshot-step 60 -geometry 1500x1200+0+0
cp "$work/shots/01_model.png" "$root/docs/img/09_vision_model.png"
cp "$work/shots/02_data.png" "$root/docs/img/10_vision_data.png"
cp "$work/shots/03_train_settings.png" "$root/docs/img/11_vision_train.png"
ls -l "$root"/docs/img/09_vision_model.png "$root"/docs/img/10_vision_data.png "$root"/docs/img/11_vision_train.png
